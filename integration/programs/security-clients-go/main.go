// Command security-clients is franz-go's part of integration/suites/39-security-clients.sh: for
// each case given on the command line it produces five records with a payload of its own to a
// topic, reads the partition back from the start and requires exactly those records, then
// requires the case's wrong credentials (a wrong password, or no client certificate on a
// listener that requires one) to be refused. One process runs every case.
//
//	security-clients CASE...
//
// A CASE is NAME,BOOTSTRAP,PROTOCOL,MECHANISM,USER,PASSWORD,BADPASSWORD with PROTOCOL one of
// SSL, SASL_PLAINTEXT, SASL_SSL and MECHANISM one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (empty
// for SSL). The topic is go-NAME. TLS uses the PEM files named by SSL_CA, SSL_CERT and SSL_KEY;
// on SSL the client presents SSL_CERT/SSL_KEY, and the negative connects without them.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

type testCase struct {
	name, bootstrap, protocol, mechanism, user, password, badPassword string
}

func parseCase(arg string) (testCase, error) {
	f := strings.Split(arg, ",")
	if len(f) != 7 {
		return testCase{}, fmt.Errorf("case %q: want 7 comma-separated fields", arg)
	}
	return testCase{f[0], f[1], f[2], f[3], f[4], f[5], f[6]}, nil
}

func tlsConfig(withClientCert bool) (*tls.Config, error) {
	caPEM, err := os.ReadFile(os.Getenv("SSL_CA"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in SSL_CA")
	}
	// ServerName is left empty: kgo sets it to the host being dialled (127.0.0.1), which the
	// server certificate names in its subject alternative names.
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withClientCert {
		cert, err := tls.LoadX509KeyPair(os.Getenv("SSL_CERT"), os.Getenv("SSL_KEY"))
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{cert}
	}
	return config, nil
}

func mechanism(c testCase, password string) (sasl.Mechanism, error) {
	switch c.mechanism {
	case "PLAIN":
		return plain.Auth{User: c.user, Pass: password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.user, Pass: password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: c.user, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown mechanism %q", c.mechanism)
}

// options are the client options of case c: good says whether with its right credentials.
func options(c testCase, good bool, extra ...kgo.Opt) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.bootstrap),
		kgo.RequestRetries(2),
		kgo.RetryTimeout(10 * time.Second),
	}
	if strings.HasSuffix(c.protocol, "SSL") {
		config, err := tlsConfig(c.protocol == "SSL" && good)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: config}).DialContext))
	}
	if strings.HasPrefix(c.protocol, "SASL_") {
		password := c.password
		if !good {
			password = c.badPassword
		}
		m, err := mechanism(c, password)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return append(opts, extra...), nil
}

func roundTrip(c testCase) error {
	topic := "go-" + c.name
	opts, err := options(c, true, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	producer, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer producer.Close()
	payload := fmt.Sprintf("go-%s-%d", c.name, time.Now().UnixNano())
	var want []string
	var records []*kgo.Record
	for i := 0; i < 5; i++ {
		value := fmt.Sprintf("%s-%d", payload, i)
		want = append(want, value)
		records = append(records, &kgo.Record{Value: []byte(value), Partition: 0})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}

	opts, err = options(c, true, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		return err
	}
	consumer, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer consumer.Close()
	var got []string
	for ctx.Err() == nil {
		fetches := consumer.PollFetches(ctx)
		for _, e := range fetches.Errors() {
			if !errors.Is(e.Err, context.DeadlineExceeded) {
				return fmt.Errorf("fetch %s[%d]: %w", e.Topic, e.Partition, e.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if strings.HasPrefix(string(r.Value), payload) {
				got = append(got, string(r.Value))
			}
		})
		if len(got) >= len(want) {
			break
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		return fmt.Errorf("read back %q, want %q", got, want)
	}
	return nil
}

// refused requires the case's wrong credentials to fail with an authentication error.
func refused(c testCase) error {
	opts, err := options(c, false)
	if err != nil {
		return err
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = client.Ping(ctx)
	if err == nil {
		return errors.New("the wrong credentials were accepted")
	}
	// A wrong password is answered SASL_AUTHENTICATION_FAILED; a TLS listener that requires a
	// client certificate ends the handshake of a client without one (an alert, or a closed
	// connection when TLS 1.3 finished the client's side first).
	signs := []string{"sasl_authentication_failed", "authentication failed"}
	if c.protocol == "SSL" {
		signs = []string{"certificate", "tls", "eof", "connection reset"}
	}
	text := strings.ToLower(err.Error())
	for _, sign := range signs {
		if strings.Contains(text, sign) {
			fmt.Printf("go %s: refused as expected: %v\n", c.name, err)
			return nil
		}
	}
	return fmt.Errorf("failed, but not as an authentication failure: %w", err)
}

func main() {
	failed := 0
	for _, arg := range os.Args[1:] {
		c, err := parseCase(arg)
		if err == nil {
			err = roundTrip(c)
		}
		if err == nil {
			fmt.Printf("go %s: 5 records produced and read back\n", c.name)
			err = refused(c)
		}
		if err != nil {
			fmt.Printf("go %s: FAIL: %v\n", c.name, err)
			failed++
		}
	}
	if failed > 0 || len(os.Args) < 2 {
		fmt.Printf("go: %d of %d cases failed\n", failed, len(os.Args)-1)
		os.Exit(1)
	}
}
