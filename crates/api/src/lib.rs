//! kamaji-api: the API types of kamaji-rs (see shared/design/ARCHITECTURE.md §3).
