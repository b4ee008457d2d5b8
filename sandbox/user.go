package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// ParseUser reads "UID[:GID]" where each part is a number or a name; a uid
// alone takes its account's group, or the same number when it has none.
func ParseUser(spec string) (uid, gid int, err error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if uid, err = strconv.Atoi(name); err != nil {
		u, lerr := user.Lookup(name)
		if lerr != nil {
			return 0, 0, fmt.Errorf("user %q: %w", spec, lerr)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	} else {
		gid = uid
	}
	if hasGroup {
		if gid, err = strconv.Atoi(group); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return 0, 0, fmt.Errorf("user %q: %w", spec, lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
	}
	return uid, gid, nil
}

// HostIdentity says what of the host a sandbox running as uid and gid
// shares: a host account's files and processes, a host group's rights
// (shadow's /etc/shadow). Each line is to be followed by the way out the
// caller's configuration offers.
func HostIdentity(uid, gid int) []string {
	var out []string
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		out = append(out, fmt.Sprintf("uid %d is the host account %q: it shares that account's files and processes", uid, u.Username))
	}
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		out = append(out, fmt.Sprintf("gid %d is the host group %q: it reads and writes what that group may", gid, g.Name))
	}
	return out
}

// homeOf is the home directory of the host account uid is, read from
// /etc/passwd, when it is a person's (personal); "" when there is none.
func homeOf(uid int) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	return personal(homeIn(f, uid), "/home")
}

// personal is home with its links resolved when, so resolved, it lies
// below homes (resolved too: Silverblue's /var/home, where /home leads,
// and the homes its accounts name there), a person's: the sockets of
// their agents, editors and containers' daemons there are theirs, so the
// sandbox's too when it runs as them. "" otherwise: system accounts'
// homes are system directories (/usr/sbin, /var/lib/...) the sandbox may
// need, and are left alone, as is a home that is a link to one. One root
// may not look at (a root-squashed NFS home) cannot be hidden, and is
// left alone too.
func personal(home, homes string) string {
	if home == "" {
		return ""
	}
	real, err := filepath.EvalSymlinks(home)
	base, berr := filepath.EvalSymlinks(homes)
	if err != nil || berr != nil || !below(real, base) {
		return ""
	}
	return real
}

// homeIn is the home uid's account names in the account database r
// (/etc/passwd's form), "" when it has none or one not absolute.
func homeIn(r io.Reader, uid int) string {
	id := strconv.Itoa(uid)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 || fields[2] != id {
			continue
		}
		if filepath.IsAbs(fields[5]) {
			return filepath.Clean(fields[5])
		}
		return ""
	}
	return ""
}
