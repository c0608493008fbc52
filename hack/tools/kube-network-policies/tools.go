//go:build tools

// Package kubenetworkpolicies pins sigs.k8s.io/kube-network-policies, the NetworkPolicy engine of
// the local cluster's multi-node mode (docs/cluster.md "Multi-node"). hack/tools.sh takes the
// module's source from the module proxy (checked against this go.sum), applies nfqueue-xt.patch
// and builds ./cmd with the module's own go.mod into bin/kube-network-policies.
//
// nfqueue-xt.patch: upstream sends packets to userspace with the native nftables queue
// expression, which this machine's kernel lacks (CONFIG_NFT_QUEUE is not set: adding the rule
// fails with ENOENT); the patch emits the same "queue num N [bypass]" as the xtables NFQUEUE
// target through nft_compat (CONFIG_NETFILTER_XT_TARGET_NFQUEUE), with unchanged verdicts.
package kubenetworkpolicies

import _ "sigs.k8s.io/kube-network-policies/cmd"
