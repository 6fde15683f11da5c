package testserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// RedisCommand sends one command to the Redis server at addr on a fresh
// connection and returns its reply: a status or bulk string as it is, an
// integer in decimal, an array as its elements joined by newlines (nested
// arrays flattened), and a nil reply as "". An error reply is returned as an
// error.
//
// It exists so that this package, which every backend's tests import, needs
// no Redis client library: a library user who imports zkdlock must not
// download go-redis for dlock's tests.
func RedisCommand(ctx context.Context, addr string, args ...string) (string, error) {
	return redisCommand(ctx, addr, nil, args)
}

// RedisCommandTLS is RedisCommand for a server started with c.
func RedisCommandTLS(ctx context.Context, addr string, c *RedisTLS, args ...string) (string, error) {
	conf, err := c.clientConfig()
	if err != nil {
		return "", err
	}
	return redisCommand(ctx, addr, conf, args)
}

// dialRedis connects to addr, over TLS if conf is not nil.
func dialRedis(ctx context.Context, addr string, conf *tls.Config) (net.Conn, error) {
	if conf != nil {
		d := tls.Dialer{Config: conf}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func redisCommand(ctx context.Context, addr string, conf *tls.Config, args []string) (string, error) {
	c, err := dialRedis(ctx, addr, conf)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	var out []string
	if err := readReply(bufio.NewReader(c), &out); err != nil {
		return "", err
	}
	return strings.Join(out, "\n"), nil
}

// readReply reads one RESP2 reply, appending its strings to out.
func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return fmt.Errorf("empty reply line")
	}
	switch kind, rest := line[0], line[1:]; kind {
	case '+', ':':
		*out = append(*out, rest)
	case '-':
		return fmt.Errorf("redis: %s", rest)
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return fmt.Errorf("bad bulk length %q", rest)
		}
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := readFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return fmt.Errorf("bad array length %q", rest)
		}
		for range max(n, 0) {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
