package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicehq/sluice/adaptive/cluster"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// Redis client timeouts: a heartbeat or a strict-mode lease request waits
// at most this long for an unreachable Redis before the replica degrades.
const (
	redisDialTimeout = time.Second
	redisIOTimeout   = 500 * time.Millisecond
)

// fleet is a running fleet coordinator and its Redis client.
type fleet struct {
	co   *cluster.Coordinator
	rdb  *redis.Client
	stop func()
}

// startFleet builds the coordinator of cfg's cluster block (nil when
// there is none), caps the limiters at once (before the listener serves
// anything) and runs it until stop. Redis is not contacted here: a replica
// starts and serves while Redis is down, degraded.
func startFleet(cfg config.Cluster, srv *proxy.Server, log *slog.Logger) (*fleet, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	opts, err := redisOptions(cfg)
	if err != nil {
		return nil, err
	}
	redis.SetLogger(redisLogger{log})
	rdb := redis.NewClient(opts)
	id := replicaID(cfg)
	co, err := cluster.New(cluster.Options{
		Client: rdb, ReplicaID: id, KeyPrefix: cfg.KeyPrefix,
		Settings: cfg.Fleet, Limiters: srv.Limiters, Rates: srv.Rates, Logger: log,
	})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	co.Attach()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { co.Run(ctx); close(done) }()
	log.Info("cluster: coordinating through Redis", "replica", id, "key_prefix", cfg.KeyPrefix, "heartbeat", cfg.Heartbeat.String())
	return &fleet{co: co, rdb: rdb, stop: func() {
		cancel()
		<-done
		rdb.Close()
	}}, nil
}

// redisOptions translates the cluster block into go-redis options.
func redisOptions(c config.Cluster) (*redis.Options, error) {
	o := &redis.Options{Addr: c.Redis}
	if strings.Contains(c.Redis, "://") {
		var err error
		if o, err = redis.ParseURL(c.Redis); err != nil {
			return nil, fmt.Errorf("cluster.redis: %w", err)
		}
	}
	if c.Password.IsSet() {
		o.Password = string(c.Password)
	}
	if o.TLSConfig != nil {
		if c.TLS.ServerName != "" {
			o.TLSConfig.ServerName = c.TLS.ServerName
		}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("cluster.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("cluster.tls.ca_file: no PEM certificate in " + c.TLS.CAFile)
			}
			o.TLSConfig.RootCAs = pool
		}
		o.TLSConfig.MinVersion = tls.VersionTLS12
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = redisDialTimeout, redisIOTimeout, redisIOTimeout
	// One retry, one dial: an unreachable Redis must show as degraded
	// within a heartbeat, and the next heartbeat retries anyway.
	o.MaxRetries, o.DialerRetries = 1, 1
	o.PoolSize = 64
	o.ClientName = "sluice"
	// Redis 7.0 has no maintenance notifications; don't ask on every dial.
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return o, nil
}

// replicaID is cluster.replica_id, or host name and process id.
func replicaID(c config.Cluster) string {
	if c.ReplicaID != "" {
		return c.ReplicaID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sluice"
	}
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r) {
			return r
		}
		return '_'
	}, host)
	return host + "-" + strconv.Itoa(os.Getpid())
}

// redisLogger sends go-redis's own messages (failed dials, mostly, which
// repeat during an outage) to the debug log; the coordinator logs the
// state changes that matter at warn.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug("redis: " + fmt.Sprintf(format, v...))
}
