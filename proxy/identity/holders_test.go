package identity

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/vishvananda/netns"
)

// A socket held by two processes of one executable in two services'
// leaves of a pod, or under two uids, is ambiguous: decided as either, it
// would be decided by the preset (or as the uid) of whichever the lookup
// met first.
func TestHoldersInTwoCgroupsAreAmbiguous(t *testing.T) {
	testutil.RequireRoot(t, "cgroups and another uid")
	for _, tc := range []struct {
		name     string
		oneLeaf  bool // both in the first service's leaf
		otherUID bool // the second as another uid
		want     string
	}{
		{"two services", false, false, "(cgroup "},
		{"two uids in one service", true, true, "runs as uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt, err := cgroup2.Mount()
			if err != nil {
				t.Fatal(err)
			}
			pod, err := cgroup2.Create(mnt, fmt.Sprintf("airlock-test-holders-%d-%d", os.Getpid(), time.Now().UnixNano()))
			if err != nil {
				t.Fatal(err)
			}
			defer cgroup2.Remove(pod)
			client, server := testutil.TCPPair(t)
			f, _ := client.(*net.TCPConn).File()
			client.Close()
			var kids []*exec.Cmd
			var leaves []string
			for i, svc := range []string{"svcB-permissive", "svcA-restricted"} {
				leaf, err := cgroup2.Create(pod, svc)
				if err != nil {
					t.Fatal(err)
				}
				leaves = append(leaves, leaf)
				cmd := exec.Command("sleep", "30")
				cmd.ExtraFiles = []*os.File{f}
				if tc.otherUID && i == 1 {
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				kids = append(kids, cmd)
				if tc.oneLeaf {
					leaf = leaves[0]
				}
				if err := cgroup2.Add(leaf, cmd.Process.Pid); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			defer func() {
				for _, c := range kids {
					c.Process.Kill()
					c.Wait()
				}
				for _, l := range leaves {
					cgroup2.Remove(l)
				}
			}()
			r, err := NewResolver(netns.None(), Cgroup(pod), NewHashCache(16))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			r.WithCgroups()
			p, err := r.Lookup(addrs(server))
			if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("holders pid %d and pid %d: Lookup = %+v, %v; want ErrAmbiguous saying %q", kids[0].Process.Pid, kids[1].Process.Pid, p, err, tc.want)
			}
		})
	}
}
