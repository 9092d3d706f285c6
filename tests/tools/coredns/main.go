// CoreDNS at the version kubeadm v1.36 pins (constants.CoreDNSVersion), built with the
// plugins of the Corefile the provider publishes (kubeadm's: errors, health, ready,
// kubernetes, prometheus, forward, cache, loop, reload, loadbalance), the way CoreDNS
// documents a build with a chosen plugin set: its own main, coremain, and the directives in
// CoreDNS's order (core/dnsserver/zdirectives.go). Leaving out the other plugins (the cloud
// DNS back ends and their SDKs) keeps the cold build short.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The subset of dnsserver.Directives, in its order ("prometheus" is plugin/metrics).
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
