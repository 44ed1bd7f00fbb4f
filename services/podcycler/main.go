// Command podcycler is molt's podcycler service. See internal/podcycler for what it does.
package main

import (
	"context"

	"molt.dev/pkg/service"
	"molt.dev/services/podcycler/internal/podcycler"
)

func main() {
	var cfg podcycler.Config
	service.Main("podcycler", cfg.RegisterFlags, func(ctx context.Context) error { return podcycler.Run(ctx, cfg) })
}
