// Package lois runs the LOIS interfaces on a real packet path (issue 17 item 2): the test
// makes its own network namespaces — device, cloud, server — joined by veth pairs, starts the
// `lois` binary's di, ci and si roles in them, and runs a real HTTP exchange (curl in the
// device namespace, Go's net/http server behind the SI). A capture on the cloud's wire
// interface checks that the UDP-carried LOIS packets show none of the original header
// fields. It needs root and /dev/net/tun and skips without them.
package lois
