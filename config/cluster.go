package config

import (
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"

	"github.com/sluicehq/sluice/settings"
)

// Cluster coordinates the limits of several Sluice replicas through Redis
// (7.x, or anything speaking its protocol). Without it (Redis empty, the
// block absent) every replica limits alone, exactly as a single Sluice
// does. Its heartbeat, lease_ttl and expected_replicas keys are a
// [settings.Fleet], with their defaults and ranges. Changes to the block
// take effect at the next restart.
type Cluster struct {
	// Redis is the server: host:port, or a redis:// or rediss:// (TLS)
	// URL, optionally with a username and a database number. A password
	// never goes here: name its environment variable in PasswordEnv.
	// Setting it turns coordination on.
	Redis string `yaml:"redis"`
	// PasswordEnv names the environment variable holding the Redis
	// password (AUTH), read at load time.
	PasswordEnv string `yaml:"password_env"`
	// TLS configures a rediss:// connection.
	TLS ClusterTLS `yaml:"tls"`
	// KeyPrefix starts every key Sluice writes ("{sluice}:..."), so several
	// fleets can share one Redis. Default "sluice"; letters, digits and
	// ._:- only.
	KeyPrefix string `yaml:"key_prefix"`
	// ReplicaID names this replica in the fleet; unique per replica.
	// Default: host name and process id ("host-1234").
	ReplicaID string `yaml:"replica_id"`
	// Fleet are the coordinator's timings: heartbeat, lease_ttl and
	// expected_replicas.
	settings.Fleet `yaml:",inline"`
	// Password is read from PasswordEnv at load time. It never prints.
	Password Secret `yaml:"-"`
}

// ClusterTLS configures TLS to Redis (a rediss:// URL).
type ClusterTLS struct {
	// CAFile is a PEM bundle of the CAs that may sign Redis's certificate;
	// empty: the system's.
	CAFile string `yaml:"ca_file"`
	// ServerName is the name checked in Redis's certificate; empty: the
	// URL's host.
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether coordination is configured.
func (c Cluster) Enabled() bool { return c.Redis != "" }

// DefaultClusterKeyPrefix is the default Cluster.KeyPrefix.
const DefaultClusterKeyPrefix = "sluice"

// DefaultCluster returns the cluster block of a file that sets none of its
// keys: off (no redis), with the default key prefix and fleet timings for
// when it is turned on.
func DefaultCluster() Cluster {
	return Cluster{KeyPrefix: DefaultClusterKeyPrefix, Fleet: settings.DefaultFleet()}
}

var (
	keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
	replicaIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
)

// cluster checks the cluster block: its syntax here, its timings by their
// own Problems; strict providers need it.
func (v *validator) cluster(c *Config) {
	cl := &c.Cluster
	if !cl.Enabled() {
		off := *cl
		off.Password = ""
		if off != (Cluster{}) && off != DefaultCluster() {
			v.add("cluster.redis", "required when the cluster block sets anything (host:port or a redis:// or rediss:// URL)")
		}
		for i := range c.Providers {
			if c.Providers[i].Limit.Fleet == settings.FleetStrict {
				v.add("providers["+strconv.Itoa(i)+"].limit.fleet", `"strict" needs the cluster block (cluster.redis): the lease of every request is kept in Redis`)
			}
		}
		return
	}
	v.redisAddr(cl)
	if cl.PasswordEnv != "" {
		v.secretEnv("cluster.password_env", cl.PasswordEnv, &cl.Password)
	}
	if f := cl.TLS.CAFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			v.add("cluster.tls.ca_file", "cannot be read: %v", err)
		}
	}
	if !keyPrefixRE.MatchString(cl.KeyPrefix) {
		v.add("cluster.key_prefix", "must be 1 to 64 characters of letters, digits and ._:-, got %q", cl.KeyPrefix)
	}
	if cl.ReplicaID != "" && !replicaIDRE.MatchString(cl.ReplicaID) {
		v.add("cluster.replica_id", "must be 1 to 128 characters of letters, digits and ._:-, got %q", cl.ReplicaID)
	}
	v.problems("cluster", cl.Fleet.Problems())
}

// redisAddr checks cluster.redis and that TLS settings go with rediss://.
func (v *validator) redisAddr(cl *Cluster) {
	const path = "cluster.redis"
	tls := false
	u, err := url.Parse(cl.Redis)
	switch {
	case err == nil && (u.Scheme == "redis" || u.Scheme == "rediss"):
		tls = u.Scheme == "rediss"
		if _, set := u.User.Password(); set {
			// Not echoed: the message must not carry the password.
			v.add(path, "must not contain a password; put it in an environment variable named by cluster.password_env")
		}
		if u.Hostname() == "" {
			v.add(path, "must have a host, e.g. redis://10.0.0.5:6379")
		}
		if db := u.Path; db != "" && db != "/" {
			if n, err := strconv.Atoi(db[1:]); err != nil || n < 0 {
				v.add(path, "the path must be a database number, e.g. redis://host:6379/0")
			}
		}
		if u.RawQuery != "" {
			v.add(path, "must not have a query (?...)")
		}
	default:
		host, port, err := net.SplitHostPort(cl.Redis)
		if err != nil || host == "" {
			v.add(path, "must be host:port or a redis:// or rediss:// URL")
			return
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			v.add(path, "port must be between 1 and 65535, got %q", port)
		}
	}
	if !tls && (cl.TLS != ClusterTLS{}) {
		v.add("cluster.tls", "needs a rediss:// URL in cluster.redis")
	}
}

// secretEnv resolves (when loading) or checks (Validate) a secret named by
// an environment variable. The value never appears in a message.
func (v *validator) secretEnv(path, env string, dst *Secret) {
	switch {
	case !envVarRE.MatchString(env):
		v.add(path, "must be the name of an environment variable (letters, digits and _, not starting with a digit), not the secret itself")
	case v.lookup != nil:
		val, ok := v.lookup(env)
		switch {
		case !ok:
			v.add(path, "environment variable %s is not set", env)
		case val == "":
			v.add(path, "environment variable %s is empty", env)
		default:
			*dst = Secret(val)
		}
	case *dst == "":
		v.add(path, "Password is empty: environment variable %s was not resolved", env)
	}
}
