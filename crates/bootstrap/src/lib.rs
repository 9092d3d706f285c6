//! kamaji-bootstrap: pure builders for the tenant PKI and kubeadm artifacts
//! (see shared/design/ARCHITECTURE.md §3).
