// Nomad's rules as this Go host applies them: the plugin's HCL spec converted to an hcldec spec
// (after Nomad v1.6.5's helper/pluginutils/hclspecutils/dec.go), the agent's config parsed with it
// and encoded with cty's msgpack (helper/pluginutils/hclutils/util.go, ParseHclInterface, and
// helper/pluginutils/loader/init.go), and the fingerprint validation of plugins/device/device.go,
// plugins/shared/structs/attribute.go and units.go. Our own code, following those files.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hjson "github.com/hashicorp/hcl/v2/json"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	devicepb "devicectltest/pb/device"
	hclspec "devicectltest/pb/hclspec"
	structspb "devicectltest/pb/structs"
)

// ---- the HCL spec, as hclspecutils.Convert turns it into an hcldec spec ------------------

func convertSpec(s *hclspec.Spec, implied string) (hcldec.Spec, error) {
	switch b := s.GetBlock().(type) {
	case *hclspec.Spec_Object:
		obj := hcldec.ObjectSpec{}
		for name, attr := range b.Object.GetAttributes() {
			sp, err := convertSpec(attr, name)
			if err != nil {
				return nil, err
			}
			obj[name] = sp
		}
		return obj, nil
	case *hclspec.Spec_Attr:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Attr.GetType()), "type", hcl.Pos{Line: 1, Column: 1})
		if diags.HasErrors() {
			return nil, diags
		}
		ty, diags := typeexpr.TypeConstraint(expr)
		if diags.HasErrors() {
			return nil, diags
		}
		name := b.Attr.GetName()
		if name == "" {
			name = implied
		}
		if name == "" {
			return nil, errors.New("missing name in attribute spec")
		}
		return &hcldec.AttrSpec{Name: name, Type: ty, Required: b.Attr.GetRequired()}, nil
	case *hclspec.Spec_Default:
		primary, err := convertSpec(b.Default.GetPrimary(), "")
		if err != nil {
			return nil, err
		}
		def, err := convertSpec(b.Default.GetDefault(), "")
		if err != nil {
			return nil, err
		}
		return &hcldec.DefaultSpec{Primary: primary, Default: def}, nil
	case *hclspec.Spec_Literal:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Literal.GetValue()), "literal", hcl.Pos{Line: 1, Column: 1})
		if diags.HasErrors() {
			return nil, diags
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			return nil, diags
		}
		return &hcldec.LiteralSpec{Value: v}, nil
	case *hclspec.Spec_BlockValue:
		nested, err := convertSpec(b.BlockValue.GetNested(), "")
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSpec{TypeName: b.BlockValue.GetName(), Nested: nested, Required: b.BlockValue.GetRequired()}, nil
	case *hclspec.Spec_BlockList:
		nested, err := convertSpec(b.BlockList.GetNested(), "")
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockListSpec{TypeName: b.BlockList.GetName(), Nested: nested,
			MinItems: int(b.BlockList.GetMinItems()), MaxItems: int(b.BlockList.GetMaxItems())}, nil
	}
	return nil, fmt.Errorf("spec kind %T not handled by this host", s.GetBlock())
}

// ParseHclInterface: the agent's config as JSON, parsed as an HCL JSON body, decoded with the spec
func encodeConfig(config map[string]interface{}, spec hcldec.Spec) ([]byte, []string, error) {
	if config == nil {
		config = map[string]interface{}{}
	}
	raw, err := json.Marshal(config)
	if err != nil {
		return nil, nil, err
	}
	file, diags := hjson.Parse(raw, "config.json")
	if diags.HasErrors() {
		return nil, nil, diags
	}
	val, diags := hcldec.Decode(file.Body, spec, &hcl.EvalContext{})
	if diags.HasErrors() {
		return nil, nil, diags
	}
	data, err := ctymsgpack.Marshal(val, val.Type())
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	for name := range val.Type().AttributeTypes() {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	return data, keys, nil
}

// ---- Nomad's fingerprint validation ---------------------------------------------------------

// plugins/shared/structs/units.go
var units = map[string]bool{}

func init() {
	for _, p := range []string{"K", "M", "G", "T", "P", "E"} {
		units[p+"iB"], units[p+"iB/s"] = true, true
	}
	for _, u := range []string{"kB", "KB", "MB", "GB", "TB", "PB", "EB"} {
		units[u], units[u+"/s"] = true, true
	}
	for _, u := range []string{"MHz", "GHz", "mW", "W", "kW", "MW", "GW"} {
		units[u] = true
	}
}

// plugins/shared/structs/attribute.go, Attribute.Validate (after the proto conversion of
// plugins/shared/structs/util.go)
func attributeProblem(a *structspb.Attribute) string {
	set := 0
	numeric := false
	switch a.GetValue().(type) {
	case *structspb.Attribute_FloatVal, *structspb.Attribute_IntVal:
		set, numeric = 1, true
	case *structspb.Attribute_StringVal, *structspb.Attribute_BoolVal:
		set = 1
	}
	if a.GetUnit() != "" {
		if !units[a.GetUnit()] {
			return fmt.Sprintf("unrecognized unit %q", a.GetUnit())
		}
		if set == 1 && !numeric {
			return "unit can not be specified on a boolean or string attribute"
		}
	}
	if set == 0 {
		return "no attribute value set"
	}
	return ""
}

// plugins/device/device.go, DeviceGroup.Validate and Device.Validate
func groupProblems(i int, g *devicepb.DeviceGroup) []string {
	var out []string
	for what, v := range map[string]string{"vendor": g.GetVendor(), "type": g.GetDeviceType(), "name": g.GetDeviceName()} {
		if v == "" {
			out = append(out, fmt.Sprintf("device group %d: device %s must be specified", i, what))
		}
	}
	for j, d := range g.GetDevices() {
		if d.GetID() == "" {
			out = append(out, fmt.Sprintf("device group %d: device %d: device ID must be specified", i, j))
		}
	}
	for name, a := range g.GetAttributes() {
		if p := attributeProblem(a); p != "" {
			out = append(out, fmt.Sprintf("device group %d: device attribute %q invalid: %s", i, name, p))
		}
	}
	return out
}
