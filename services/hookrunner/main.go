// Command hookrunner is molt's hookrunner service. See internal/hookrunner for what it does.
package main

import (
	"context"

	"molt.dev/pkg/service"
	"molt.dev/services/hookrunner/internal/hookrunner"
)

func main() {
	var cfg hookrunner.Config
	service.Main("hookrunner", cfg.RegisterFlags, func(ctx context.Context) error { return hookrunner.Run(ctx, cfg) })
}
