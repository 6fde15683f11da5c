package faultinject

import (
	"context"
	"fmt"
)

// openOther opens backends that have no case in holder.open.
func openOther(ctx context.Context, h *holder, cfg HolderConfig) error {
	return fmt.Errorf("holder: unknown backend %q", cfg.Backend)
}
