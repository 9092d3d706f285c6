// netcheck: a static client for test pods on the test machines (no dependencies).
module kamaji-rs.test/tools/netcheck

go 1.26.0
