// The real-cluster lane's driver (scripts/real-cluster.sh execs it): builds
// the pinned control plane of the sibling modules, starts and stops it,
// prints its environment. Standard library only.
module gpufleet.dev/tools/realcluster/cmd/realcluster

go 1.24
