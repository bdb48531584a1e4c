// Package components is the registration list: the one place, besides
// each kind's own package, where the built-in sink and source kinds are
// named. Everything that needs to know the kinds — configuration,
// validation, the daemon's wiring, recovery, `weir kinds` and
// docs/configuration.md — reads the Registry built here.
//
// To add a kind, write its package (see docs/extending.md) and add its
// Component to the list below; nothing else changes.
package components

import (
	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/internal/sink/mysqlsink"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/source/arrowipcsrc"
	"github.com/weir-io/weir/internal/source/filesrc"
	"github.com/weir-io/weir/internal/source/flightsrc"
	"github.com/weir-io/weir/internal/source/kafkasrc"
	"github.com/weir-io/weir/internal/source/natssrc"
)

// List is the built-in kinds, in documentation order.
func List() component.List {
	return component.List{
		DefaultSink: filesink.Kind,
		Sinks: []component.SinkDef{
			filesink.Component(),
			parquetsink.Component(),
			pgsink.Component(),
			mysqlsink.Component(),
			kafkasink.Component(),
			flightsink.Component(),
		},
		Sources: []component.SourceDef{
			kafkasrc.Component(),
			natssrc.Component(),
			filesrc.Component(),
			flightsrc.Component(),
			arrowipcsrc.Component(),
		},
	}
}

var builtin = component.MustNew(List())

// Registry is the built-in kinds. It is built once: configurations loaded
// against it compare equal.
func Registry() *component.Registry { return builtin }
