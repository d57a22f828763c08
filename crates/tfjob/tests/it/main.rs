//! End-to-end tests of the TFJob operator on kube-sim.
