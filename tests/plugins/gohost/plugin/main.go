// A small Nomad device plugin built on HashiCorp's go-plugin, written the way Nomad's example
// device plugin is (the files of a directory as devices): config `dir` (default ".") and
// `list_period` (a duration string, default "5s") declared as an HCL spec with defaults, the
// config decoded from cty msgpack, the period parsed with time.ParseDuration. A host that does
// not fill the spec's defaults sends no list_period and this plugin refuses it, as the example
// does ("failed to parse list period").
//
// It also serves go-plugin's GRPCStdio service (go-plugin >= 1.4 plugins send their stdout and
// stderr through it; Debian's go-plugin 1.0.1 predates it, so this plugin offers it itself from
// the same proto) and writes a line to each channel when configured.
package main

import (
	"context"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/golang/protobuf/ptypes"
	"github.com/golang/protobuf/ptypes/empty"
	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	basepb "devicectltest/pb/base"
	devicepb "devicectltest/pb/device"
	gopb "devicectltest/pb/goplugin"
	hclspec "devicectltest/pb/hclspec"
	structspb "devicectltest/pb/structs"
)

var configType = cty.Object(map[string]cty.Type{"dir": cty.String, "list_period": cty.String})

func withDefault(name, literal string) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Default{Default: &hclspec.Default{
		Primary: &hclspec.Spec{Block: &hclspec.Spec_Attr{Attr: &hclspec.Attr{Name: name, Type: "string"}}},
		Default: &hclspec.Spec{Block: &hclspec.Spec_Literal{Literal: &hclspec.Literal{Value: literal}}},
	}}}
}

type files struct {
	logger hclog.Logger
	mu     sync.Mutex
	dir    string
	period time.Duration
	stdio  chan *gopb.StdioData
}

// ---- BasePlugin -----------------------------------------------------------------------------

func (f *files) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{Type: basepb.PluginType_DEVICE, PluginApiVersions: []string{"v0.1.0"},
		PluginVersion: "0.2.0", Name: "go-files"}, nil
}

func (f *files) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	spec := &hclspec.Spec{Block: &hclspec.Spec_Object{Object: &hclspec.Object{Attributes: map[string]*hclspec.Spec{
		"dir":         withDefault("dir", `"."`),
		"list_period": withDefault("list_period", `"5s"`),
	}}}}
	return &basepb.ConfigSchemaResponse{Spec: spec}, nil
}

func (f *files) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	if req.GetPluginApiVersion() != "v0.1.0" {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported API version %q", req.GetPluginApiVersion())
	}
	val, err := ctymsgpack.Unmarshal(req.GetMsgpackConfig(), configType)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "failed to decode config: %v", err)
	}
	str := func(name string) string {
		v := val.GetAttr(name)
		if v.IsNull() {
			return ""
		}
		return v.AsString()
	}
	period, err := time.ParseDuration(str("list_period"))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "failed to parse list period %q: %v", str("list_period"), err)
	}
	f.mu.Lock()
	f.dir, f.period = str("dir"), period
	f.mu.Unlock()
	f.logger.Info("configured", "dir", f.dir, "list_period", period.String())
	f.say(gopb.StdioData_STDOUT, fmt.Sprintf("go-files: watching %s every %s\n", f.dir, period))
	f.say(gopb.StdioData_STDERR, "go-files: stderr says hello\n")
	return &basepb.SetConfigResponse{}, nil
}

func (f *files) say(ch gopb.StdioData_Channel, text string) {
	select {
	case f.stdio <- &gopb.StdioData{Channel: ch, Data: []byte(text)}:
	default: // nobody drains the stream: drop rather than block
	}
}

// ---- GRPCStdio ------------------------------------------------------------------------------

func (f *files) StreamStdio(_ *empty.Empty, s gopb.GRPCStdio_StreamStdioServer) error {
	for {
		select {
		case <-s.Context().Done():
			return nil
		case d := <-f.stdio:
			if err := s.Send(d); err != nil {
				return err
			}
		}
	}
}

// ---- DevicePlugin ---------------------------------------------------------------------------

func (f *files) list() (*devicepb.FingerprintResponse, error) {
	f.mu.Lock()
	dir := f.dir
	f.mu.Unlock()
	entries, err := ioutil.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	group := &devicepb.DeviceGroup{Vendor: "go-plugin", DeviceType: "file", DeviceName: "plain",
		Attributes: map[string]*structspb.Attribute{}}
	var total int64
	for _, e := range entries {
		if e.Mode().IsRegular() {
			group.Devices = append(group.Devices, &devicepb.DetectedDevice{ID: e.Name(), Healthy: true})
			total += e.Size()
		}
	}
	sort.Slice(group.Devices, func(i, j int) bool { return group.Devices[i].ID < group.Devices[j].ID })
	group.Attributes["size"] = &structspb.Attribute{Value: &structspb.Attribute_IntVal{IntVal: (total + 1023) / 1024}, Unit: "KiB"}
	return &devicepb.FingerprintResponse{DeviceGroup: []*devicepb.DeviceGroup{group}}, nil
}

func (f *files) Fingerprint(_ *devicepb.FingerprintRequest, s devicepb.DevicePlugin_FingerprintServer) error {
	for {
		resp, err := f.list()
		if err != nil {
			return status.Errorf(codes.Unavailable, "cannot list: %v", err)
		}
		if err := s.Send(resp); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-time.After(f.period):
		}
	}
}

func (f *files) Stats(req *devicepb.StatsRequest, s devicepb.DevicePlugin_StatsServer) error {
	interval, _ := ptypes.Duration(req.GetCollectionInterval())
	if interval <= 0 {
		interval = time.Second
	}
	for {
		resp, err := f.list()
		if err != nil {
			return status.Errorf(codes.Unavailable, "cannot list: %v", err)
		}
		stats := &devicepb.DeviceGroupStats{Vendor: "go-plugin", Type: "file", Name: "plain", InstanceStats: map[string]*devicepb.DeviceStats{}}
		for _, d := range resp.DeviceGroup[0].Devices {
			stats.InstanceStats[d.ID] = &devicepb.DeviceStats{Summary: &structspb.StatValue{Desc: "present"}, Timestamp: ptypes.TimestampNow()}
		}
		if err := s.Send(&devicepb.StatsResponse{Groups: []*devicepb.DeviceGroupStats{stats}}); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func (f *files) Reserve(_ context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	f.mu.Lock()
	dir := f.dir
	f.mu.Unlock()
	res := &devicepb.ContainerReservation{Envs: map[string]string{"GO_FILES": fmt.Sprint(req.GetDeviceIds())}}
	for _, id := range req.GetDeviceIds() {
		res.Mounts = append(res.Mounts, &devicepb.Mount{TaskPath: "/files/" + id, HostPath: filepath.Join(dir, id), ReadOnly: true})
	}
	return &devicepb.ReserveResponse{ContainerRes: res}, nil
}

// ---- go-plugin ------------------------------------------------------------------------------

type devicePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl *files
}

func (p *devicePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	basepb.RegisterBasePluginServer(s, p.impl)
	devicepb.RegisterDevicePluginServer(s, p.impl)
	gopb.RegisterGRPCStdioServer(s, p.impl)
	return nil
}

func (p *devicePlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, fmt.Errorf("plugin side only")
}

// grpcServer is go-plugin's default server; where GOFILES_CALLS names a file, it also notes each
// call's method there in the order the calls' headers arrived on the connection (a tap handle runs
// in the transport's reader, before the call's handler starts), for a test to read.
func grpcServer(opts []grpc.ServerOption) *grpc.Server {
	path := os.Getenv("GOFILES_CALLS")
	if path == "" {
		return plugin.DefaultGRPCServer(opts)
	}
	var mu sync.Mutex
	arrived := func(ctx context.Context, info *tap.Info) (context.Context, error) {
		mu.Lock()
		defer mu.Unlock()
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(f, info.FullMethodName)
			f.Close()
		}
		return ctx, nil
	}
	return grpc.NewServer(append(opts, grpc.InTapHandle(arrived))...)
}

func main() {
	logger := hclog.New(&hclog.LoggerOptions{Name: "go-files", Level: hclog.Info, JSONFormat: true})
	impl := &files{logger: logger, stdio: make(chan *gopb.StdioData, 64)}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{
			ProtocolVersion:  2,
			MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
			MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
		},
		Plugins:    map[string]plugin.Plugin{"device": &devicePlugin{impl: impl}},
		GRPCServer: grpcServer,
		Logger:     logger,
	})
}
