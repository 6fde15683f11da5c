package etcddlock

import (
	"context"
	"net/url"

	"github.com/dlockdev/dlock/driver"
)

// QueueDirForTest returns the etcd key prefix of the entries of key.
func QueueDirForTest(prefix, key string) string {
	return (&etcdDriver{prefix: prefix}).queueDir(key)
}

// OpenDriverForTest opens the driver behind dlock.Open for an etcd URL, for
// tests that wrap it to inject faults.
func OpenDriverForTest(ctx context.Context, rawURL string) (driver.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u)
}
