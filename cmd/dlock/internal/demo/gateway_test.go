package demo

import (
	"context"
	"errors"
	"testing"

	"github.com/dlockdev/dlock/memdlock"
)

// Without python3 or a JDK in PATH, StartGateway says which tool is
// missing, before it writes or starts anything.
func TestStartGateway_missingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	client, _, err := memdlock.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	g, err := StartGateway(context.Background(), client)
	if !errors.Is(err, ErrMissingTool) {
		if g != nil {
			_ = g.Close()
		}
		t.Fatalf("StartGateway with an empty PATH: %v, want ErrMissingTool", err)
	}
}
