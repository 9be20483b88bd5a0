// Command group-member is one member of a consumer group run by franz-go, for the franz-go group
// tests (tests/rdkafka_clients/franz_group.rs, tests/cluster_failover/franz_group.rs). It joins
// a group, reads from the start of every partition it is given, and after each poll commits
// what it processed before it lets a rebalance take partitions away. Every event goes to stdout,
// one line each, for the test's checker:
//
//	protocol consumer|classic     the first ConsumerGroupHeartbeat, the first JoinGroup sent
//	assigned TOPIC PARTITION      a partition given to this member
//	revoked TOPIC PARTITION       a partition given back (after its records were committed)
//	lost TOPIC PARTITION          a partition lost without a chance to commit (fenced, expired)
//	record TOPIC PARTITION OFFSET VALUE
//	commit ok                     the records printed since the last commit line are committed
//	commit failed ERROR           ... are not (another member reads them again)
//	closed                        left the group after SIGTERM
//
// franz-go v1.22.3 runs the KIP-848 consumer protocol only when ServerSideBalancer is set, the
// broker serves ConsumerGroupHeartbeat v1 or later and the first balancer is a sticky or range
// one (cooperative-sticky, the default, maps to the broker's `uniform` assignor); anything else
// is the classic protocol. `-protocol consumer` sets ServerSideBalancer over the defaults,
// `-protocol classic` keeps the defaults as they are.
//
//	group-member -brokers HOST:PORT -group G -name NAME [-regex] [-protocol consumer|classic]
//	    [-process-ms N] TOPIC...
//
// With -regex each TOPIC is a regular expression. -process-ms is how long processing a poll's
// records takes before their commit (a window in which a killed member has read and not
// committed). SIGTERM leaves the group (revoking, which
// commits nothing new: every poll is committed before the next) and exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var outMu sync.Mutex

// emit writes one event line to stdout (unbuffered: one write per line).
func emit(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func emitPartitions(what string, m map[string][]int32) {
	for topic, partitions := range m {
		for _, p := range partitions {
			emit("%s %s %d", what, topic, p)
		}
	}
}

// protocolSeen reports which group protocols the client speaks, from the requests it writes
// to brokers: a member that fell back from the consumer protocol to the classic one reports
// both.
type protocolSeen struct{ consumer, classic sync.Once }

func (h *protocolSeen) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch key {
	case int16(kmsg.ConsumerGroupHeartbeat):
		h.consumer.Do(func() { emit("protocol consumer") })
	case int16(kmsg.JoinGroup):
		h.classic.Do(func() { emit("protocol classic") })
	}
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap host:port")
	group := flag.String("group", "", "consumer group")
	name := flag.String("name", "member", "client id")
	regex := flag.Bool("regex", false, "topics are regular expressions")
	protocol := flag.String("protocol", "consumer", "consumer (KIP-848) or classic")
	processMs := flag.Int("process-ms", 0, "time spent processing each poll's records")
	flag.Parse()
	if *brokers == "" || *group == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: group-member -brokers HOST:PORT -group G -name NAME [-regex] [-protocol consumer|classic] TOPIC...")
		os.Exit(2)
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ClientID(*name),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(flag.Args()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Processing and its commit happen between a poll and AllowRebalance: no revocation
		// in between, so no partition is processed after it has been given back.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emitPartitions("assigned", m)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emitPartitions("revoked", m)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emitPartitions("lost", m)
		}),
		// New topics (a regex) and partitions are seen within a second or two.
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.MetadataMaxAge(time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.WithHooks(&protocolSeen{}),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
			return time.Now().Format("15:04:05.000 ") + *name + " "
		})),
	}
	if *regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	switch *protocol {
	case "consumer":
		opts = append(opts, kgo.ServerSideBalancer())
	case "classic":
		// A rebalance is noticed within half a second rather than the default three.
		opts = append(opts, kgo.HeartbeatInterval(500*time.Millisecond), kgo.SessionTimeout(10*time.Second))
	default:
		fmt.Fprintf(os.Stderr, "unknown -protocol %q\n", *protocol)
		os.Exit(2)
	}

	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, 500)
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.Canceled {
				fmt.Fprintf(os.Stderr, "%s fetch %s %d: %v\n", *name, t, p, err)
			}
		})
		records := fetches.Records()
		for _, r := range records {
			emit("record %s %d %d %s", r.Topic, r.Partition, r.Offset, r.Value)
		}
		if len(records) > 0 {
			time.Sleep(time.Duration(*processMs) * time.Millisecond)
			// Not the signal's context: what was processed is committed even while stopping.
			commitCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := cl.CommitRecords(commitCtx, records...); err != nil {
				emit("commit failed %s", strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				emit("commit ok")
			}
			cancel()
		}
		cl.AllowRebalance()
	}
	// Leaves the group: the final revocation runs, then the leave request.
	cl.CloseAllowingRebalance()
	emit("closed")
}
