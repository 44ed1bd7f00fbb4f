package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ProbeCommand is the first argument that turns any molt binary into a
// health check of itself: `<binary> probe <url>`. Images are built FROM
// scratch, without a shell or curl, so an exec health check (docker-compose's
// healthcheck, a Kubernetes exec probe) runs the binary it already has.
const ProbeCommand = "probe"

// probeTimeout bounds one probe: connect, request and the answer's head.
const probeTimeout = 5 * time.Second

// probeBodyLimit is how much of a failing answer's body the message quotes.
const probeBodyLimit = 200

// Probe GETs rawURL and returns nil when the answer is 2xx; otherwise an
// error that says what was asked and what came back (status and the start
// of the body, or why there was no answer).
func Probe(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("probe %q: not an http:// or https:// URL", rawURL)
	}
	shown := u.Redacted() // a password in the URL is never printed
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", shown, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is already in the message
		}
		return fmt.Errorf("probe %s: no answer: %w", shown, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := strings.Join(strings.Fields(string(body)), " ")
		if msg == "" {
			return fmt.Errorf("probe %s: answered %s", shown, resp.Status)
		}
		return fmt.Errorf("probe %s: answered %s: %s", shown, resp.Status, msg)
	}
	return nil
}

// RunProbe is the probe command: args are what follows "probe". It returns
// the exit code: 0 when the URL answered 2xx, 1 otherwise, with the reason on
// stderr.
func RunProbe(name string, args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "usage: %s %s <url>   (exit 0 when GET <url> answers 2xx within %s, 1 otherwise)\n", name, ProbeCommand, probeTimeout)
		return 1
	}
	if err := Probe(context.Background(), args[0]); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	u, _ := url.Parse(args[0]) // Probe parsed it
	fmt.Fprintf(stdout, "%s: probe %s: ok\n", name, u.Redacted())
	return 0
}
