// Package layout holds the tests of the repository's shape, the rules the
// code keeps as it grows (docs/architecture.md): no source file over 600
// lines, a doc comment on every package, the scenario scripts in place.
package layout
