// A small device-plugin host built on HashiCorp's go-plugin, configured and driven the way a
// Nomad client loads an external device plugin. It is our own code; the behaviour it follows is
// Nomad v1.6.5's, cited per step:
//
//   - helper/pluginutils/loader/init.go (fingerprintPlugin): start with Nomad's handshake
//     (plugins/base/plugin.go: protocol version 2, NOMAD_PLUGIN_MAGIC_COOKIE), gRPC only,
//     PluginInfo, a parseable plugin version, an API version both speak, ConfigSchema;
//   - the same file (validatePluginConfig): the spec converted to an hcldec spec
//     (helper/pluginutils/hclspecutils/dec.go), the agent's config parsed with it
//     (helper/pluginutils/hclutils/util.go, ParseHclInterface: JSON -> HCL JSON body -> hcldec),
//     the cty value encoded with cty's msgpack, SetConfig on an instance that is then killed;
//   - client/devicemanager/instance.go: a fresh instance, SetConfig with the agent config,
//     Fingerprint validated as handleFingerprint does (plugins/device/device.go, Validate;
//     plugins/shared/structs/attribute.go, Validate; units.go), Stats, Reserve;
//   - go-plugin's reattach (a client built from ReattachConfig) and Kill (Shutdown, then up to
//     2 s for the process to exit before SIGKILL).
//
// Usage: gohost RUN.json; prints one JSON report on stdout; diagnostics and go-plugin's own log
// on stderr. With "interrupt": true it prints READY and waits for a SIGINT to its process group
// before shutting the plugin down.
package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/ioutil"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/golang/protobuf/ptypes"
	"github.com/golang/protobuf/ptypes/empty"
	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/hcl/v2/hcldec"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	basepb "devicectltest/pb/base"
	devicepb "devicectltest/pb/device"
	gopb "devicectltest/pb/goplugin"
)

// Nomad's handshake (plugins/base/plugin.go)
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// The device API versions this host speaks (plugins/device/versions.go: ApiVersion010)
var apiVersions = []string{"v0.1.0"}

type run struct {
	Name      string                 `json:"name"`
	Command   []string               `json:"command"`
	Env       map[string]string      `json:"env"`
	Config    map[string]interface{} `json:"config"`
	Interrupt bool                   `json:"interrupt"`
	AutoMTLS  bool                   `json:"auto_mtls"`
}

type remote struct {
	base   basepb.BasePluginClient
	device devicepb.DevicePluginClient
	stdio  gopb.GRPCStdioClient
}

type devicePlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (devicePlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("this is the host side only")
}

func (devicePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &remote{basepb.NewBasePluginClient(c), devicepb.NewDevicePluginClient(c), gopb.NewGRPCStdioClient(c)}, nil
}

// a log sink that keeps what go-plugin says, to read its verdict on Kill
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	os.Stderr.Write(p)
	return s.buf.Write(p)
}

func (s *logSink) since(mark int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()[mark:]
}

func (s *logSink) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Len()
}

var (
	sink   = &logSink{}
	logger = hclog.New(&hclog.LoggerOptions{Name: "gohost", Level: hclog.Debug, Output: sink})
	report = map[string]interface{}{"errors": []string{}}
)

func fail(format string, args ...interface{}) {
	report["errors"] = append(report["errors"].([]string), fmt.Sprintf(format, args...))
}

func newClient(r *run, reattach *plugin.ReattachConfig) *plugin.Client {
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          map[string]plugin.Plugin{"device": devicePlugin{}},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		AutoMTLS:         r.AutoMTLS && reattach == nil,
	}
	if reattach != nil {
		cfg.Reattach = reattach
	} else {
		cmd := exec.Command(r.Command[0], r.Command[1:]...)
		cmd.Env = os.Environ()
		for k, v := range r.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cfg.Cmd = cmd
	}
	return plugin.NewClient(cfg)
}

func dispense(c *plugin.Client) (*remote, error) {
	rpc, err := c.Client()
	if err != nil {
		return nil, err
	}
	raw, err := rpc.Dispense("device")
	if err != nil {
		return nil, err
	}
	return raw.(*remote), nil
}

// hashicorp/go-version's pattern, as Nomad's loader parses PluginVersion with it
var versionRe = regexp.MustCompile(`^v?([0-9]+(\.[0-9]+)*?)(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?$`)

// ---- the loader's checks, then the device manager's instance --------------------------------

func negotiate(r *remote) (*basepb.PluginInfoResponse, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := r.base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("PluginInfo: %v", err)
	}
	if info.GetType() != basepb.PluginType_DEVICE {
		return nil, nil, fmt.Errorf("plugin type %v", info.GetType())
	}
	if !versionRe.MatchString(info.GetPluginVersion()) {
		return nil, nil, fmt.Errorf("failed to parse plugin %q version %q", info.GetName(), info.GetPluginVersion())
	}
	api := ""
	for _, ours := range apiVersions {
		for _, theirs := range info.GetPluginApiVersions() {
			if ours == theirs {
				api = theirs
			}
		}
	}
	if api == "" {
		return nil, nil, fmt.Errorf("no common API version in %v", info.GetPluginApiVersions())
	}
	schema, err := r.base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("ConfigSchema: %v", err)
	}
	spec, err := convertSpec(schema.GetSpec(), "")
	if err != nil {
		return nil, nil, fmt.Errorf("failed converting config schema: %v", err)
	}
	return info, nil, setConfig(ctx, r, spec, api)
}

var currentRun *run

func setConfig(ctx context.Context, r *remote, spec hcldec.Spec, api string) error {
	data, keys, err := encodeConfig(currentRun.Config, spec)
	if err != nil {
		return fmt.Errorf("failed to parse config: %v", err)
	}
	report["sent_keys"] = keys
	report["msgpack_hex"] = hex.EncodeToString(data)
	report["api_version"] = api
	// the agent config a Nomad client passes (client/config: the default client port range)
	agent := &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}}
	_, err = r.base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: data, NomadConfig: agent, PluginApiVersion: api})
	if err != nil {
		return fmt.Errorf("setting config on plugin failed: %v", err)
	}
	return nil
}

// kill: go-plugin's Kill, and its own verdict on whether the exit was graceful
func kill(c *plugin.Client) string {
	mark := sink.mark()
	started := time.Now()
	c.Kill()
	said := sink.since(mark)
	if strings.Contains(said, "plugin failed to exit gracefully") {
		return "forced"
	}
	return fmt.Sprintf("graceful in %.1fs", time.Since(started).Seconds())
}

func main() {
	raw, err := ioutil.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r := &run{}
	if err := json.Unmarshal(raw, r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	currentRun = r
	// a foreground Nomad agent gets Ctrl-C with its plugins; it shuts them down itself
	interrupts := make(chan os.Signal, 4)
	signal.Notify(interrupts, os.Interrupt)
	drive(r, interrupts)
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
}

func drive(r *run, interrupts chan os.Signal) {
	// 1. the loader: fingerprint the plugin, validate its config, kill that instance
	loader := newClient(r, nil)
	rem, err := dispense(loader)
	if err != nil {
		fail("loader: %v", err)
		loader.Kill()
		return
	}
	info, _, err := negotiate(rem)
	if err != nil {
		fail("loader: %v", err)
		loader.Kill()
		return
	}
	report["info"] = map[string]interface{}{"name": info.GetName(), "version": info.GetPluginVersion(), "api": info.GetPluginApiVersions()}
	report["loader_kill"] = kill(loader)

	// 2. the device manager's instance
	client := newClient(r, nil)
	rem, err = dispense(client)
	if err != nil {
		fail("instance: %v", err)
		client.Kill()
		return
	}
	if _, _, err := negotiate(rem); err != nil {
		fail("instance: %v", err)
		client.Kill()
		return
	}
	streams, stop := context.WithCancel(context.Background())
	stdioErr := make(chan error, 1)
	go func() {
		s, err := rem.stdio.StreamStdio(streams, &empty.Empty{})
		if err == nil {
			for {
				var chunk *gopb.StdioData
				if chunk, err = s.Recv(); err != nil {
					break
				}
				logger.Info("plugin stdio", "channel", chunk.GetChannel().String(), "data", string(chunk.GetData()))
			}
		}
		stdioErr <- err
	}()
	ids := fingerprint(streams, rem)
	stats(streams, rem)
	reserve(rem, ids)
	select {
	case err := <-stdioErr:
		report["stdio"] = fmt.Sprintf("ended: %v", status.Code(err))
	case <-time.After(300 * time.Millisecond):
		report["stdio"] = "open"
	}

	// 3. reattach, as a restarted agent reattaches to a plugin it started (go-plugin 1.0.1's
	// ReattachConfig carries no TLS settings: with AutoMTLS the same client goes on)
	rc := client.ReattachConfig()
	re, again := client, rem
	if !r.AutoMTLS {
		re = newClient(r, rc)
		if again, err = dispense(re); err != nil {
			fail("reattach: %v", err)
			again = rem
		}
	}
	if i2, err := again.base.PluginInfo(context.Background(), &basepb.PluginInfoRequest{}); err != nil {
		fail("reattach: PluginInfo: %v", err)
	} else if !r.AutoMTLS {
		report["reattach"] = i2.GetName()
	}

	// 4. Ctrl-C to the whole process group: the plugin must leave its shutdown to us
	if r.Interrupt {
		fmt.Println("READY")
		select {
		case <-interrupts:
		case <-time.After(20 * time.Second):
			fail("no SIGINT arrived")
		}
		time.Sleep(500 * time.Millisecond)
		if client.Exited() {
			report["interrupt"] = "the plugin exited"
		} else if _, err := again.base.PluginInfo(context.Background(), &basepb.PluginInfoRequest{}); err != nil {
			report["interrupt"] = fmt.Sprintf("the plugin stopped answering: %v", err)
		} else {
			report["interrupt"] = "the plugin kept serving"
		}
	}

	// 5. shut down: the device manager cancels its streams, then kills the plugin
	stop()
	report["kill"] = kill(re)
	if addr := rc.Addr; addr != nil && addr.Network() == "unix" {
		_, err := os.Stat(addr.String())
		report["socket_left"] = err == nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for !client.Exited() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	report["exited"] = client.Exited()
	if !client.Exited() {
		client.Kill()
	}
}

func fingerprint(ctx context.Context, r *remote) []string {
	s, err := r.device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		fail("Fingerprint: %v", err)
		return nil
	}
	first, err := s.Recv()
	if err != nil {
		fail("Fingerprint: %v", err)
		return nil
	}
	var problems, ids []string
	groups := []map[string]interface{}{}
	for i, g := range first.GetDeviceGroup() {
		problems = append(problems, groupProblems(i, g)...)
		var devs []string
		for _, d := range g.GetDevices() {
			devs = append(devs, d.GetID())
			ids = append(ids, d.GetID())
		}
		attrs := map[string]string{}
		for name, a := range g.GetAttributes() {
			attrs[name] = a.GetUnit()
		}
		groups = append(groups, map[string]interface{}{
			"vendor": g.GetVendor(), "type": g.GetDeviceType(), "name": g.GetDeviceName(), "devices": devs, "units": attrs,
		})
	}
	report["fingerprint"] = map[string]interface{}{"groups": groups, "problems": problems}
	return ids
}

func stats(ctx context.Context, r *remote) {
	s, err := r.device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: ptypes.DurationProto(200 * time.Millisecond)})
	if err != nil {
		fail("Stats: %v", err)
		return
	}
	reply, err := s.Recv()
	if err != nil {
		fail("Stats: %v", err)
		return
	}
	devices := 0
	for _, g := range reply.GetGroups() {
		devices += len(g.GetInstanceStats())
	}
	report["stats"] = map[string]interface{}{"groups": len(reply.GetGroups()), "devices": devices}
}

func reserve(r *remote, ids []string) {
	want := []string{"no-such-device"}
	if len(ids) > 0 {
		want = ids[:1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := r.device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: want})
	if err != nil {
		report["reserve"] = map[string]interface{}{"ids": want, "code": status.Code(err).String(), "message": status.Convert(err).Message()}
		return
	}
	c := res.GetContainerRes()
	report["reserve"] = map[string]interface{}{
		"ids": want, "code": codes.OK.String(), "envs": c.GetEnvs(), "mounts": len(c.GetMounts()), "devices": len(c.GetDevices()),
	}
}
