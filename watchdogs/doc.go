// Package watchdogs holds the host-side watchdogs run by systemd timers or
// launchd: recover the gateway after an OOM, restart a dead or hung shim.
package watchdogs
