package mountinfo

import "testing"

// A line that cannot be read fails the whole: a mount left unread could be
// the one looked for. Escaped paths are read as the kernel wrote them.
func TestParse(t *testing.T) {
	for _, bad := range []string{"", "22 1 0:21 / /proc rw\n", "x 1 0:21 / /proc rw - proc proc rw\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = nil error; want one", bad)
		}
	}
	m, err := Parse([]byte(`28 25 0:21 / /srv/my\040chroot/proc rw,nodev shared:5 master:1 - proc proc rw` + "\n"))
	if err != nil || len(m) != 1 || m[0].ID != 28 || m[0].Point != "/srv/my chroot/proc" || m[0].FSType != "proc" || !m[0].HasOpt("nodev") {
		t.Fatalf("Parse = %+v, %v", m, err)
	}
}
