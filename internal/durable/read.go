package durable

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ReadLines reads JSON lines from r, as AppendLine writes them: the values
// in order, and how many lines were skipped as torn (a crash's half line)
// or not whole (whole reports what a value must hold).
func ReadLines[T any](r io.Reader, whole func(*T) bool) (vs []T, torn int, err error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var v T
			if json.Unmarshal(line, &v) != nil || !whole(&v) {
				torn++
			} else {
				vs = append(vs, v)
			}
		}
		if errors.Is(err, io.EOF) {
			return vs, torn, nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}
