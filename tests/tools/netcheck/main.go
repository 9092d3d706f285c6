// Command netcheck is a static client for test pods on the kamaji-rs test machines.
//
//	netcheck -resolve NAME -get URL [-cacert FILE] [-token FILE]
//	netcheck -say TEXT
//	netcheck -serve ADDR [-webhook ADDR -cert FILE -key FILE]
//
// It resolves NAME through the pod's resolver (/etc/resolv.conf, Go's own resolver), then
// GETs URL (TLS verified against -cacert, bearer token from -token when the file exists),
// printing one line per step. It exits 0 only when the name resolves and the status is 200.
//
// -say prints TEXT and exits (a command to `kubectl exec`). -serve answers every HTTP request
// on ADDR with "netcheck <hostname>" (a target for `kubectl port-forward`) and logs one line
// per request; with -webhook it also serves a validating admission webhook over TLS on that
// address, which denies objects named "deny-me" and allows everything else.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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
	say := flag.String("say", "", "print this and exit")
	serve := flag.String("serve", "", "serve HTTP on this address")
	webhook := flag.String("webhook", "", "serve the admission webhook over TLS on this address")
	cert := flag.String("cert", "", "webhook serving certificate (PEM)")
	key := flag.String("key", "", "webhook serving key (PEM)")
	flag.Parse()
	if *say != "" {
		fmt.Println(*say)
		return
	}
	if *serve != "" {
		if err := serveAll(*serve, *webhook, *cert, *key); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		return
	}
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

func serveAll(addr, webhook, cert, key string) error {
	host, _ := os.Hostname()
	errs := make(chan error, 2)
	go func() {
		errs <- http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Printf("served %s %s\n", r.Method, r.URL.Path)
			fmt.Fprintf(w, "netcheck %s\n", host)
		}))
	}()
	if webhook != "" {
		go func() {
			errs <- http.ListenAndServeTLS(webhook, cert, key, http.HandlerFunc(admit))
		}()
	}
	fmt.Printf("serving on %s (webhook %q)\n", addr, webhook)
	return <-errs
}

// admit answers an admission.k8s.io/v1 AdmissionReview: denies objects named "deny-me".
func admit(w http.ResponseWriter, r *http.Request) {
	var review map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, _ := review["request"].(map[string]any)
	uid, _ := req["uid"].(string)
	name, _ := req["name"].(string)
	response := map[string]any{"uid": uid, "allowed": name != "deny-me"}
	if name == "deny-me" {
		response["status"] = map[string]any{"code": 403, "message": "denied by the netcheck webhook"}
	}
	fmt.Printf("reviewed %q allowed=%v\n", name, name != "deny-me")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1",
		"kind":       "AdmissionReview",
		"response":   response,
	})
}
