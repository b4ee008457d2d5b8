package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/internal/c1"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/spf13/cobra"
)

// defaultAdminSocket is the demo pod's; a manifest's pod names its own
// (admin.socket, default <state_dir>/admin.sock).
const defaultAdminSocket = "/var/lib/airlock/demo/admin.sock"

// adminDo sends one request to the pod and returns its answer, or an error
// naming the socket when no pod answers.
func adminDo(cmd *cobra.Command, socket, method, path string) (*http.Response, error) {
	resp, err := adminclient.Do(cmd.Context(), socket, method, path)
	var se *adminclient.StatusError
	switch {
	case errors.As(err, &se):
		return nil, err
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("the admin socket %s is its owner's only (0600): run this as root", socket)
	case err != nil:
		return nil, fmt.Errorf("no pod answers on %s (is `airlock up` running? --socket or AIRLOCK_ADMIN_SOCKET names another): %w", socket, err)
	}
	return resp, nil
}

func socketFlag(cmd *cobra.Command, socket *string) {
	cmd.Flags().StringVar(socket, "socket", defaultAdminSocket, "`PATH` of the pod's admin socket")
}

func newStatusCmd() *cobra.Command {
	var socket string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the pod and its services",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := adminDo(cmd, socket, http.MethodGet, "/v1/status")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var st supervisor.Status
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				return fmt.Errorf("status: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				// A service's last lines are its own output.
				return json.NewEncoder(c1.Writer{W: out}).Encode(st)
			}
			printStatus(out, st)
			return nil
		},
	}
	socketFlag(cmd, &socket)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func printStatus(w io.Writer, st supervisor.Status) {
	ready := "no"
	if st.Ready {
		ready = "yes"
	}
	fmt.Fprintf(w, "pod %s  ready: %s  up: %v  policy: %s\n\n", st.Pod, ready, (time.Duration(st.Uptime) * time.Second).Round(time.Second), st.Policy)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSTATE\tPID\tRESTARTS\tLAST EXIT\tPRESET\tSINCE\tDETAIL")
	for _, s := range st.Services {
		pid, exit := "-", "-"
		if s.Pid != 0 {
			pid = fmt.Sprint(s.Pid)
		}
		if s.LastExit != nil {
			exit = fmt.Sprint(*s.LastExit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Name, s.State, pid, s.Restarts, exit, s.Preset,
			s.Since.Local().Format(time.TimeOnly), oneLine(s.Detail))
	}
	tw.Flush()
	if len(st.Ingress) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INGRESS\tLISTEN\tSERVICE")
		for _, r := range st.Ingress {
			fmt.Fprintf(tw, "%s\thttp://%s\t%s:%d\n", r.Name, r.Listen, r.Service, r.Port)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nevents: %s\n", st.Events)
	if st.EventsFailed > 0 {
		fmt.Fprintf(w, "        %d not recorded there (see the supervisor's log)\n", st.EventsFailed)
	}
	fmt.Fprintf(w, "audit:  %s\n", st.Audit)
}

func oneLine(s string) string {
	s = spawn.Printable(s)
	if len(s) > 100 {
		// On a character's first byte: the rest of one cut in two is no
		// UTF-8, and its 0x9b a CSI to a terminal in an 8-bit locale.
		cut := 97
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

func newRestartCmd() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "restart SERVICE",
		Short: "Restart one service of the pod (at once, not counted as a crash)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := adminDo(cmd, socket, http.MethodPost, adminclient.RestartPath(args[0]))
			if err != nil {
				return err
			}
			resp.Body.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "restarting %s\n", args[0])
			return nil
		},
	}
	socketFlag(cmd, &socket)
	return cmd
}

func newEventsCmd() *cobra.Command {
	var socket, since, file string
	var follow bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the pod's events (agent-inbox.jsonl), one JSON line each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var t time.Time
			if since != "" {
				var err error
				if t, err = parseSince(since); err != nil {
					return &exitError{ExitUsage, fmt.Errorf("--since %q: %w", since, err)}
				}
			}
			// An event's detail may hold what a sandbox printed.
			out := c1.Writer{W: cmd.OutOrStdout()}
			enc := json.NewEncoder(out)
			if file != "" {
				// The pod may be gone: read its file directly.
				if follow {
					return events.Follow(cmd.Context(), file, t, func(e events.Event) { enc.Encode(e) })
				}
				evs, err := events.Read(file, t)
				for _, e := range evs {
					enc.Encode(e)
				}
				return err
			}
			q := url.Values{}
			if !t.IsZero() {
				q.Set("since", t.Format(time.RFC3339Nano))
			}
			if follow {
				q.Set("follow", "1")
			}
			resp, err := adminDo(cmd, socket, http.MethodGet, "/v1/events?"+q.Encode())
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			for sc.Scan() {
				fmt.Fprintln(out, sc.Text())
			}
			// A line past the buffer, or a broken stream, is said: a
			// follower that stopped quietly would miss every later event.
			if err := sc.Err(); err != nil {
				return fmt.Errorf("events from the pod: %w", err)
			}
			return nil
		},
	}
	socketFlag(cmd, &socket)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are written")
	cmd.Flags().StringVar(&since, "since", "", "only events at or after `TIME`: an RFC 3339 time or a duration ago (10m)")
	cmd.Flags().StringVar(&file, "file", "", "read this events `FILE` directly instead of asking the pod")
	return cmd
}

// parseSince reads an RFC 3339 time or a duration back from now.
func parseSince(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}
