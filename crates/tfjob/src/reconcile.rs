//! The reconciler (I/O) on controller-kit.
