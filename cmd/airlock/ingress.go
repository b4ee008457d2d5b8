package main

import (
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/supervisor/ingress"
	"github.com/spf13/cobra"
)

func newIngressCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ingress",
		Short: "Manage the operator keys of the pod's ingress routes",
	}
	cmd.AddCommand(newIngressKeyCmd())
	return cmd
}

// newIngressKeyCmd makes an operator's key. The key goes to stdout and
// nowhere else (the file keeps its hash), so it can be piped into a
// secret store; what was done goes to stderr.
func newIngressKeyCmd() *cobra.Command {
	var operator, keys string
	var replace bool
	cmd := &cobra.Command{
		Use:   "key --operator NAME --keys FILE",
		Short: "Make an operator's API key: its hash is added to FILE, the key is printed once",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &exitError{ExitUsage, fmt.Errorf("unexpected argument %q: airlock ingress key --operator NAME --keys FILE", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case operator == "" || keys == "":
				return &exitError{ExitUsage, errors.New("--operator and --keys are required")}
			case !ingress.ValidOperator(operator):
				return &exitError{ExitUsage, fmt.Errorf("--operator %q: names are made of A-Z a-z 0-9 . _ @ -", operator)}
			}
			key, err := ingress.AddKey(keys, operator, replace)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), key)
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: wrote the hash of operator %s's key to %s; the key is shown once, stored nowhere\n", operator, keys)
			return nil
		},
	}
	cmd.Flags().StringVar(&operator, "operator", "", "operator `NAME` the key is for (A-Z a-z 0-9 . _ @ -), in audit lines and X-Airlock-Operator")
	cmd.Flags().StringVar(&keys, "keys", "", "key `FILE` to add the key's hash to (created 0600)")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace the operator's existing key(s) instead of refusing")
	return cmd
}
