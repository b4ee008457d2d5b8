package main

import (
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/spf13/cobra"
	"github.com/vishvananda/netns"
)

// newRedirectCmd is the init step of the sidecar shape: it installs, in
// the namespace it runs in (or --netns), the nft table airlock's own
// sandboxes get, so that every TCP connection and DNS query of the
// workload ends at `airlock proxy --transparent/--dns` beside it. The
// proxy's own uid is exempt: its upstream dials leave from this namespace.
func newRedirectCmd() *cobra.Command {
	var r sandbox.EgressRules
	var exemptUID int64
	var nsPath string
	var localPorts []int
	var proxyPort int
	cmd := &cobra.Command{
		Use:   "redirect --transparent-port PORT --dns-port PORT --exempt-uid UID",
		Short: "Make the transparent proxy this network namespace's only way out (the sidecar's init step; needs CAP_NET_ADMIN)",
		Example: `  # in the workload's namespace, before the workload starts; the proxy runs as uid 1337
  airlock redirect --transparent-port 15001 --dns-port 15053 --exempt-uid 1337
  airlock proxy --preset coder --transparent 127.0.0.1:15001 --transparent '[::1]:15001' \
    --dns 127.0.0.1:15053 --dns '[::1]:15053'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if r.TransparentPort < 1 || r.TransparentPort > 65535 || r.DNSPort < 1 || r.DNSPort > 65535 {
				return &exitError{ExitUsage, errors.New("--transparent-port and --dns-port are required (1-65535)")}
			}
			if exemptUID < 0 || exemptUID > 4294967294 {
				return &exitError{ExitUsage, errors.New("--exempt-uid is required: the proxy's uid, whose own connections must leave (0-4294967294)")}
			}
			if proxyPort < 1 || proxyPort > 65535 {
				return &exitError{ExitUsage, fmt.Errorf("--proxy-port %d: want 1-65535", proxyPort)}
			}
			uid := uint32(exemptUID)
			r.ExemptUID = &uid
			if uid == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock: warning: --exempt-uid 0: any root process of the workload leaves untouched; run the proxy under a uid of its own")
			}
			// The explicit proxy's port is a loopback port too (the
			// redirect's own are always reachable).
			r.LocalTCPPorts, r.AllLocalTCP = append(localPorts, proxyPort), len(localPorts) == 0
			ns := netns.None()
			if nsPath != "" {
				h, err := netns.GetFromPath(nsPath)
				if err != nil {
					return fmt.Errorf("--netns %s: %w", nsPath, err)
				}
				defer h.Close()
				ns = h
			}
			if err := sandbox.InstallEgress(ns, r); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: TCP now leads to port %d and DNS to port %d; uid %d is exempt\n", r.TransparentPort, r.DNSPort, uid)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&r.TransparentPort, "transparent-port", 0, "`PORT` of the proxy's --transparent listeners (127.0.0.1 and ::1)")
	fl.IntVar(&r.DNSPort, "dns-port", 0, "`PORT` of the proxy's --dns answerer (127.0.0.1 and ::1)")
	fl.Int64Var(&exemptUID, "exempt-uid", -1, "the proxy's `UID`: its own connections pass untouched")
	fl.IntSliceVar(&localPorts, "local-port", nil, "loopback TCP `PORT`s the workload may connect to besides the proxy's (repeatable; default: any)")
	fl.IntVar(&proxyPort, "proxy-port", 3128, "`PORT` of the explicit proxy (airlock proxy --listen), reachable with --local-port too")
	fl.StringVar(&nsPath, "netns", "", "network namespace `FILE` to install into (default: this process's)")
	return cmd
}
