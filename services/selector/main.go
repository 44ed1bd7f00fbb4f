// Command selector is molt's selector service. See internal/selector for what it does.
package main

import (
	"context"

	"molt.dev/pkg/service"
	"molt.dev/services/selector/internal/selector"
)

func main() {
	var cfg selector.Config
	service.Main("selector", cfg.RegisterFlags, func(ctx context.Context) error { return selector.Run(ctx, cfg) })
}
