package sandbox

import (
	"fmt"
	"os/user"
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
