// Command netcheck is a static client for test pods on the kamaji-rs test machines.
//
//	netcheck -resolve NAME -get URL [-cacert FILE] [-token FILE]
//
// It resolves NAME through the pod's resolver (/etc/resolv.conf, Go's own resolver), then
// GETs URL (TLS verified against -cacert, bearer token from -token when the file exists),
// printing one line per step. It exits 0 only when the name resolves and the status is 200.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	resolve := flag.String("resolve", "", "name to resolve")
	get := flag.String("get", "", "URL to GET")
	cacert := flag.String("cacert", "", "CA bundle for -get (PEM)")
	token := flag.String("token", "", "file holding a bearer token for -get")
	flag.Parse()
	if err := run(*resolve, *get, *cacert, *token); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func run(name, url, cacert, tokenFile string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if name != "" {
		r := &net.Resolver{PreferGo: true}
		addrs, err := r.LookupHost(ctx, name)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", name, err)
		}
		fmt.Printf("resolved %s %s\n", name, strings.Join(addrs, ","))
	}
	if url == "" {
		return nil
	}
	tlsConfig := &tls.Config{}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("no certificate in %s", cacert)
		}
		tlsConfig.RootCAs = pool
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if tokenFile != "" {
		if t, err := os.ReadFile(tokenFile); err == nil {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(t)))
		}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	fmt.Printf("%d %s %s\n", resp.StatusCode, url, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
