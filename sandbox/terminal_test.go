package sandbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The drain at close ends at the cursor reports it asked for, in order,
// right one after the other, whole or split between reads anywhere, after
// answers and keys of other kinds, and after reports of the sandbox's,
// some of its places among them (a prefix of its sequence: a decoy); not
// at reports of the sandbox's alone, nor at its sequence apart or out of
// order, nor once more than maxDrainReports reports were read.
func TestCursorReports(t *testing.T) {
	places := [reportPlaces]string{"3;4", "5;6", "7;8", "9;10"}
	seq := "\x1b[3;4R\x1b[5;6R\x1b[7;8R\x1b[9;10R"
	other := func(n int) string { return strings.Repeat("\x1b[1;1R", n) }
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{seq, true},
		{"\x9b3;4R\x9b5;6R\x9b7;8R\x9b9;10R", true},
		{"\x1b[3;4R\x9b5;6R\x1b[7;8R\x9b9;10R", true},
		{"\x1bP1$r0m\x1b\\\x1b]11;rgb:0/0/0\x07\x1b[?62;22c\x1b[1;1R" + seq + "after", true},
		{"typed\x1b[3;4R" + seq, true},                          // the sandbox's of the first place, then the sequence
		{"\x1b[3;4R\x1b[5;6R\x1b[7;8R" + seq, true},             // a decoy: all but the last
		{"\x1b[3;4R\x1b[5;6R\x1b[3;4R\x1b[5;6R" + seq, true},    // decoys overlapping
		{"\x1b[3;4\x1b[3;4R\x1b[5;6R\x1b[7;8R\x1b[9;10R", true}, // one cut short
		{other(maxDrainReports-reportPlaces) + seq, true},
		{other(maxDrainReports-reportPlaces+1) + seq, false}, // more than maxDrainReports before its end
		{other(100) + seq + seq, false},
		{"\x1b[3;4R\x1b[5;6R\x1b[7;8R", false},
		{"\x1b[5;6R\x1b[7;8R\x1b[9;10R", false},
		{"\x1b[9;10R\x1b[7;8R\x1b[5;6R\x1b[3;4R", false},
		{"\x1b[3;4R\x1b[5;6R\x1b[9;10R\x1b[7;8R", false},
		{"\x1b[3;4R\x1b[5;6Rx\x1b[7;8R\x1b[9;10R", false},
		{"\x1b[3;4R\x1b[5;6R\x1b\x1b[7;8R\x1b[9;10R", false},
		{"\x1b[3;4R\x1b[5;6R\x1b[?7;8R\x1b[9;10R", false},
		{"\x1b[3;4R\x1b[5;6R\x1b[7;8R\x1b[9;100R", false},
		{"\x1b[3;4R\x1b[5;6R\x1b[1;1R\x1b[7;8R\x1b[9;10R", false},
		{"[3;4R[5;6R[7;8R[9;10R", false},
	} {
		whole := cursorReports{places: places}
		if got := whole.scan([]byte(tc.in)); got != tc.want {
			t.Errorf("%q read whole: %v; want %v", tc.in, got, tc.want)
		}
		split := cursorReports{places: places}
		got := false
		for i := range len(tc.in) {
			got = got || split.scan([]byte{tc.in[i]})
		}
		if got != tc.want {
			t.Errorf("%q read a byte at a time: %v; want %v", tc.in, got, tc.want)
		}
	}
}

// The drain's request ends a string and a synchronized update the
// sandbox may have left on, saves the cursor, turns origin mode off, asks
// for reports at reportPlaces places on the screen (24 by 80 when its
// size is unknown, or so small that a sandbox could ask for every run of
// places: the 8-by-8 screen's 64 cells are enough), and restores the
// cursor; its cursorReports looks for those.
func TestAskCursorReports(t *testing.T) {
	place := `\x1b\[(\d+);(\d+)H\x1b\[6n`
	req := regexp.MustCompile(`^\x18\x1b\\\x1b\[\?2026l\x1b7\x1b\[\?6l` + strings.Repeat(place, reportPlaces) + `\x1b8$`)
	seen := map[string]bool{}
	for _, size := range [][2]int{{30, 100}, {0, 0}, {1, 2}, {2, 1}, {1, 1}, {0, 80}, {2, 30}, {8, 8}} {
		rows, cols := size[0], size[1]
		if rows*cols < 64 {
			rows, cols = 24, 80
		}
		for range 200 {
			ask, c := askCursorReports(size[0], size[1])
			m := req.FindStringSubmatch(string(ask))
			if m == nil {
				t.Fatalf("%v: the request %q is not CAN, ST, mode 2026 off, DECSC, origin mode off, %d places reported, DECRC", size, ask, reportPlaces)
			}
			for i := range reportPlaces {
				row, _ := strconv.Atoi(m[1+2*i])
				col, _ := strconv.Atoi(m[2+2*i])
				if row < 1 || row > rows || col < 1 || col > cols {
					t.Fatalf("%v: the request %q asks at a place off a screen of %d by %d", size, ask, rows, cols)
				}
				if want := fmt.Sprintf("%d;%d", row, col); c.places[i] != want {
					t.Fatalf("%v: the request %q looked for as %q", size, ask, c.places)
				}
			}
			seen[strings.Join(c.places[:], " ")] = true
		}
	}
	if len(seen) < 1500 { // 1600 barring a collision
		t.Errorf("1600 requests asked at %d sequences of places only; want them random", len(seen))
	}
}

// The relay takes a cursor report or primary device attributes typed by
// the terminal, whole or split between reads, for its having answered;
// not keys.
func TestAnswerSeen(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"\x1b[12;34R", true},
		{"\x9b12;34R", true},
		{"\x1b[?62;22c", true},
		{"\x1b[?1;2c", true},
		{"typed\x1b[A\x1b[12;34R", true},
		{"typed\r", false},
		{"\x1b[A\x1b[1;5C\x1b[3~\x1bOP\x1b[15;2~", false},
		{"\x1b[c", false},
		{"\x1b[?12;34R", false},
		{"[12;34R", false},
		{"\x1b[12;3\x1bR", false},
	} {
		var whole answerSeen
		if got := whole.scan([]byte(tc.in)); got != tc.want {
			t.Errorf("%q read whole: %v; want %v", tc.in, got, tc.want)
		}
		var split answerSeen
		got := false
		for i := range len(tc.in) {
			got = got || split.scan([]byte{tc.in[i]})
		}
		if got != tc.want {
			t.Errorf("%q read a byte at a time: %v; want %v", tc.in, got, tc.want)
		}
	}
}
