// Package watchdogs holds the host-side watchdogs run by systemd timers or
// launchd: recover the gateway after an OOM, restart a dead or hung shim.
//
// They live outside the pod on purpose: a supervisor that is itself hung,
// or a plain process no supervisor watches, cannot report its own death.
// Each watchdog is the same loop (Watchdog) around two parts: a Probe that
// looks and says what is wrong, and a Recoverer that acts (through the
// pod's admin API, or a configured command). The loop owns what they share:
// the restart budget, the state file that carries counts across one-shot
// runs, and the lines in the pod's agent-inbox.jsonl.
package watchdogs
