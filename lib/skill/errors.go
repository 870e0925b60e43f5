package skill

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a place in a skill file.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	f := p.File
	if f == "" {
		f = "skill"
	}
	if p.Line == 0 {
		return f
	}
	if p.Col == 0 {
		return fmt.Sprintf("%s:%d", f, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", f, p.Line, p.Col)
}

func (p Pos) plusLines(n int) Pos {
	if n > 0 {
		p.Line += n
		p.Col = 0
	}
	return p
}

// Problem is one error found in a skill, with its place.
type Problem struct {
	Pos Pos
	Msg string
}

func (p Problem) String() string { return p.Pos.String() + ": " + p.Msg }

// Errors collects every problem in a skill so lint can report them all.
type Errors struct {
	List []Problem
}

func (e *Errors) add(pos Pos, format string, args ...any) {
	e.List = append(e.List, Problem{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

func (e *Errors) Error() string {
	sort.SliceStable(e.List, func(i, j int) bool { return e.List[i].Pos.Line < e.List[j].Pos.Line })
	lines := make([]string, len(e.List))
	for i, p := range e.List {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (e *Errors) orNil() error {
	if len(e.List) == 0 {
		return nil
	}
	return e
}
