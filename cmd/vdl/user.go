package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/internal/users"
)

// userCmd edits the Kafka SASL users file: salted SCRAM credentials, never
// the password itself (docs/security.md).
func userCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{Use: "user", Short: "Add or remove Kafka SASL users (SCRAM-SHA-256/512 credentials in the users file)"}
	cmd.PersistentFlags().StringVar(&file, "file", "users.toml", "the users file ([sasl] users_file)")

	var name, passwordFile string
	var iterations int
	add := &cobra.Command{
		Use:     "add",
		Short:   "Add a user, or set a new password for one",
		Example: "  vdl user add --file users.toml --name alice --password-file alice.pw\n  echo -n secret | vdl user add --name bob --password-file -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pw, err := readPassword(passwordFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			f, err := loadOrNew(file)
			if err != nil {
				return err
			}
			if err := f.Set(name, pw, iterations); err != nil {
				return err
			}
			if err := f.Save(file); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s set in %s (SCRAM-SHA-256 and SCRAM-SHA-512, %d iterations)\n", name, file, iterations)
			return nil
		},
	}
	add.Flags().StringVar(&name, "name", "", "user name")
	add.Flags().StringVar(&passwordFile, "password-file", "", "file holding the password, - for stdin")
	add.Flags().IntVar(&iterations, "iterations", users.DefaultIterations, "PBKDF2 iterations")
	_ = add.MarkFlagRequired("name")
	_ = add.MarkFlagRequired("password-file")

	var rmName string
	remove := &cobra.Command{
		Use:   "remove",
		Short: "Remove a user (connections already authenticated stay open)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := users.Load(file)
			if err != nil {
				return err
			}
			if !f.Remove(rmName) {
				return fmt.Errorf("no user %q in %s", rmName, file)
			}
			if err := f.Save(file); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s removed from %s\n", rmName, file)
			return nil
		},
	}
	remove.Flags().StringVar(&rmName, "name", "", "user name")
	_ = remove.MarkFlagRequired("name")

	cmd.AddCommand(add, remove)
	return cmd
}

func loadOrNew(file string) (*users.File, error) {
	f, err := users.Load(file)
	if errors.Is(err, fs.ErrNotExist) {
		return &users.File{}, nil
	}
	return f, err
}

// readPassword reads a password from a file or stdin ("-"), without its
// trailing newline.
func readPassword(file string, stdin io.Reader) (string, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 4096))
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("password: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", errors.New("password: empty")
	}
	return pw, nil
}
