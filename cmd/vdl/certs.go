package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/internal/pki"
)

// certsCmd makes a cluster's certificates and admin token with crypto/x509
// (no openssl needed): docs/security.md.
func certsCmd() *cobra.Command {
	var dir, cluster, nodes, configs string
	var hosts, operators []string
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a cluster CA, node and operator certificates and an admin token (keeps what exists)",
		Example: "  vdl certs --dir certs --cluster prod-a --nodes 1,2,3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3,vdl.example.com\n" +
			"  vdl certs --dir certs --nodes 4 --hosts 10.0.0.4        # one more node, same CA",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ids, err := parseIDs("--nodes", nodes)
			if err != nil {
				return err
			}
			configIDs, err := parseIDs("--config-servers", configs)
			if err != nil {
				return err
			}
			if err := pki.EnsureDir(dir, cluster, ids, configIDs, hosts, operators); err != nil {
				return err
			}
			if _, err := pki.EnsureToken(filepath.Join(dir, "admin.token")); err != nil {
				return err
			}
			fmt.Printf("certificates and admin token in %s: ca.crt (give it to clients), node<id>.crt/.key (one pair per server), "+
				"config<id>.crt/.key (one pair per config server), operator-<name>.crt/.key, admin.token; keep ca.key offline\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "certs", "directory for the CA, certificates and token")
	cmd.Flags().StringVar(&cluster, "cluster", "vdl", "cluster name (in the CA's subject)")
	cmd.Flags().StringVar(&nodes, "nodes", "1,2,3", "node ids to make certificates for")
	cmd.Flags().StringVar(&configs, "config-servers", "", "config server ids to make certificates for (e.g. 1,2,3)")
	cmd.Flags().StringSliceVar(&hosts, "hosts", []string{"127.0.0.1", "localhost"}, "DNS names and IP addresses clients reach the servers by")
	cmd.Flags().StringSliceVar(&operators, "operator", []string{"admin"}, "operator certificates to make")
	return cmd
}

func parseIDs(flag, s string) ([]uint64, error) {
	var ids []uint64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%s: %q is not an id", flag, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
