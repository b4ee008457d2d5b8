package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// A demo boot's events, as `airlock up` wrote them (trimmed of the steps
// between policy and health, which change nothing here); a first healthy
// event is not "recovered", which only a replacement's is.
const demoBoot = `{"ts":"2026-11-23T14:04:00.565699747Z","source":"supervisor","kind":"boot_step","severity":"info","detail":"state done in 1.227ms"}
{"ts":"2026-11-23T14:04:00.623764375Z","source":"supervisor","kind":"boot_step","severity":"info","detail":"policy done in 57.438ms"}
{"ts":"2026-11-23T14:04:00.674265096Z","source":"supervisor","kind":"boot_step","severity":"info","detail":"services done in 45µs"}
{"ts":"2026-11-23T14:04:00.757697542Z","source":"supervisor","kind":"started","severity":"info","service":"shim","detail":"pid 21923"}
{"ts":"2026-11-23T14:04:00.921620294Z","source":"supervisor","kind":"health","severity":"info","service":"shim","detail":"healthy","recovered":false}
{"ts":"2026-11-23T14:04:01.03727891Z","source":"supervisor","kind":"started","severity":"info","service":"gateway","detail":"pid 21947"}
{"ts":"2026-11-23T14:04:01.212080744Z","source":"supervisor","kind":"health","severity":"info","service":"gateway","detail":"healthy","recovered":false}
{"ts":"2026-11-23T14:04:01.212218245Z","source":"supervisor","kind":"boot_step","severity":"info","detail":"health done in 537.703ms"}
{"ts":"2026-11-23T14:04:01.213406203Z","source":"supervisor","kind":"ready","severity":"info","detail":"every service is healthy, 649ms after boot began"}
{"ts":"2026-11-23T14:04:02.000000000Z","source":"supervisor","kind":"started","severity":"info","service":"shim","detail":"pid 30000"}`

func parseEvents(t *testing.T, lines string) []events.Event {
	t.Helper()
	var evs []events.Event
	for _, l := range strings.Split(lines, "\n") {
		var e events.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		evs = append(evs, e)
	}
	return evs
}

func TestBootTimes(t *testing.T) {
	evs := parseEvents(t, demoBoot)
	tests := []struct {
		name    string
		evs     []events.Event
		want    bootSample
		wantErr string
	}{
		{
			// From the state step's start (its event less 1.227ms) to
			// ready; the shim took 163.922752ms, the gateway 174.801834ms;
			// the steps before the services 1.227+57.438+0.045ms. The
			// shim's start after READY is no part of the boot.
			name: "the demo's boot",
			evs:  evs,
			want: bootSample{total: 648933456 * time.Nanosecond, services: 338724586 * time.Nanosecond, steps: 58710 * time.Microsecond},
		},
		{name: "no ready", evs: evs[:8], wantErr: "whole boot"},
		{name: "a service never healthy", evs: append(append([]events.Event(nil), evs[:5]...), evs[5], evs[7], evs[8]), wantErr: "never healthy map[gateway:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bootTimes(tt.evs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("bootTimes = %+v, %v, want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("bootTimes = %+v, %v, want %+v", got, err, tt.want)
			}
		})
	}
}

func TestShimBackoff(t *testing.T) {
	if got, want := shimBackoff(), "200ms ±20%"; got != want {
		t.Errorf("shimBackoff() = %q, want %q (the demo's shim takes the default backoff)", got, want)
	}
}
