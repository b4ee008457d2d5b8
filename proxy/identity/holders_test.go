package identity

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/vishvananda/netns"
)

// A socket held by two processes of one executable in two services'
// leaves of a pod (or, besides, under two uids) is ambiguous: decided as
// either, it would be decided by the preset of whichever the lookup met
// first.
func TestHoldersInTwoCgroupsAreAmbiguous(t *testing.T) {
	testutil.RequireRoot(t, "cgroups and another uid")
	for _, diffUID := range []bool{false, true} {
		t.Run(fmt.Sprint("diffUID=", diffUID), func(t *testing.T) {
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
				if diffUID && i == 1 {
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				kids = append(kids, cmd)
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
			if !errors.Is(err, ErrAmbiguous) {
				t.Errorf("holders pid %d (%s) and pid %d (%s): Lookup = %+v, %v; want ErrAmbiguous", kids[0].Process.Pid, leaves[0], kids[1].Process.Pid, leaves[1], p, err)
			}
		})
	}
}
