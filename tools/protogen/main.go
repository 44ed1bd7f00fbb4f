package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

// plugins collects repeated -plugin BIN[:PARAM] flags.
type plugins []string

func (p *plugins) String() string     { return strings.Join(*p, ",") }
func (p *plugins) Set(v string) error { *p = append(*p, v); return nil }

func run() error {
	fs := flag.NewFlagSet("protogen", flag.ContinueOnError)
	importDir := fs.String("I", ".", "directory the .proto paths are relative to")
	outDir := fs.String("out", "", "directory the plugins' files are written under (required)")
	var plugs plugins
	fs.Var(&plugs, "plugin", "protoc plugin binary, optionally followed by :PARAMETER (repeatable)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *outDir == "" {
		return errors.New("-out is required")
	}
	if len(plugs) == 0 {
		return errors.New("at least one -plugin is required")
	}
	files := fs.Args()
	if len(files) == 0 {
		return errors.New("no .proto files given")
	}

	req, err := compile(context.Background(), *importDir, files)
	if err != nil {
		return err
	}
	for _, p := range plugs {
		bin, param, _ := strings.Cut(p, ":")
		if err := runPlugin(bin, param, req, *outDir); err != nil {
			return err
		}
	}
	return nil
}

// compile parses and links files and returns the request every plugin gets:
// the files to generate plus all of their dependencies, dependencies first.
func compile(ctx context.Context, importDir string, files []string) (*pluginpb.CodeGeneratorRequest, error) {
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			ImportPaths: []string{importDir},
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	linked, err := c.Compile(ctx, files...)
	if err != nil {
		return nil, fmt.Errorf("compile %v: %w", files, err)
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, toProto(fd))
	}
	for _, f := range linked {
		add(f)
	}
	for _, f := range linked {
		req.SourceFileDescriptors = append(req.SourceFileDescriptors, toProto(f))
	}
	return req, nil
}

func toProto(fd protoreflect.FileDescriptor) *descriptorpb.FileDescriptorProto {
	if res, ok := fd.(linker.Result); ok {
		return res.FileDescriptorProto()
	}
	return protodesc.ToFileDescriptorProto(fd)
}

// runPlugin sends req with param to the plugin binary and writes the files
// it answers with under outDir.
func runPlugin(bin, param string, req *pluginpb.CodeGeneratorRequest, outDir string) error {
	req = proto.CloneOf(req)
	if param != "" {
		req.Parameter = proto.String(param)
	}
	in, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshal request for %s: %w", bin, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run plugin %s: %w: %s", bin, err, stderr.String())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("decode response of plugin %s: %w", bin, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("plugin %s: %s", bin, resp.GetError())
	}
	for _, f := range resp.File {
		if f.GetInsertionPoint() != "" {
			return fmt.Errorf("plugin %s: insertion points are not supported (file %s)", bin, f.GetName())
		}
		path := filepath.Join(outDir, filepath.FromSlash(f.GetName()))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", path, err)
		}
		if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
