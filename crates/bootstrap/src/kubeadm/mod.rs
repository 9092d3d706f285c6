//! Tenant-side kubeadm objects, as `kubeadm init` would create them (see
//! shared/reference/kubeadm-join.md for the shapes and where each comes from).
