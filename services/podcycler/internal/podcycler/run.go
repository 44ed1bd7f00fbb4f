package podcycler

import (
	"context"

	"molt.dev/pkg/service"
)

// Run starts podcycler and blocks until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		<-ctx.Done()
		return nil
	})
}
