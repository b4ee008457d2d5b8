package main

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

type demoPod struct{ manifest *manifest.Pod }

func newDemoPod(string, *slog.Logger) (*demoPod, error)            { return nil, errors.New("stub") }
func (d *demoPod) show(context.Context, io.Writer, *supervisor.Pod) {}
func (d *demoPod) Close()                                           {}
