package nodeopts

import "testing"

func TestWithHeap(t *testing.T) {
	for _, c := range []struct {
		in   string
		mb   int
		want string
	}{
		{"", 128, "--max-old-space-size=128"},
		{"--enable-source-maps", 128, "--enable-source-maps --max-old-space-size=128"},
		{"--max-old-space-size=64 --trace-warnings", 128, "--trace-warnings --max-old-space-size=128"},
		{"--trace-warnings --max-old-space-size 64 --enable-source-maps", 256, "--trace-warnings --enable-source-maps --max-old-space-size=256"},
		{"--max_old_space_size=64 --max-old-space-size=96", 128, "--max-old-space-size=128"},
		{`--require "/opt/my app/hook.js"  --max-old-space-size=64`, 128, `--require "/opt/my app/hook.js" --max-old-space-size=128`},
	} {
		got := WithHeap(c.in, c.mb)
		if got != c.want {
			t.Errorf("WithHeap(%q, %d) = %q, want %q", c.in, c.mb, got, c.want)
		}
		if n := HeapMB(got); n != c.mb {
			t.Errorf("HeapMB(%q) = %d, want %d", got, n, c.mb)
		}
	}
}

func TestHeapMB(t *testing.T) {
	for in, want := range map[string]int{
		"":                                   0,
		"--enable-source-maps":               0,
		"--max-old-space-size=4096":          4096,
		"--max-old-space-size 512 --inspect": 512,
		"--max_old_space_size=64 --max-old-space-size=96": 96,
		`--title "--max-old-space-size=9"`:                0,
	} {
		if got := HeapMB(in); got != want {
			t.Errorf("HeapMB(%q) = %d, want %d", in, got, want)
		}
	}
}
