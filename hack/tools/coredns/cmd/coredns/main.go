// Command coredns is CoreDNS (github.com/coredns/coredns) with only the plugins the local
// cluster's multi-node mode needs (hack/cluster/nodes.sh, docs/cluster.md "Multi-node"): cluster
// DNS for Services and pods from the API (kubernetes), with errors, health, ready and cache. No
// forward plugin: nothing outside the cluster is resolved (the nodes have no route out). Built
// static (hack/tools.sh: CGO off) for its image, which holds nothing but the binary.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The execution order of the plugins above, as in upstream's plugin.cfg.
	dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"}
}

func main() { coremain.Run() }
