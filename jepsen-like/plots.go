package campaign

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/vdl-project/vdl/checker"
)

// The report's figures, drawn with gonum/plot to SVG: throughput and
// latency over time with the fault windows shaded, and the outcome counts
// per operation and client.

// figure is one plot of the report.
type figure struct {
	Name, Title string
	SVG         []byte
}

// faultColors shade each kind of fault the same way in every figure
// (not premultiplied: translucent over the lines).
var faultColors = map[string]color.NRGBA{
	"kill":             {R: 230, G: 80, B: 80, A: 60},
	"power-loss":       {R: 160, G: 40, B: 160, A: 60},
	"pause":            {R: 240, G: 170, B: 40, A: 70},
	"partition":        {R: 60, G: 120, B: 230, A: 55},
	"partition-oneway": {R: 40, G: 190, B: 200, A: 60},
	"partition-dc":     {R: 20, G: 60, B: 160, A: 60},
	"disk-full":        {R: 120, G: 120, B: 120, A: 70},
	"slow-disk":        {R: 150, G: 110, B: 60, A: 60},
	"leader-transfer":  {R: 0, G: 160, B: 60, A: 120},
	"crash":            {R: 200, G: 30, B: 30, A: 80},
	"torn-write":       {R: 200, G: 100, B: 30, A: 80},
	"disk-error":       {R: 90, G: 90, B: 200, A: 70},
	"replace":          {R: 100, G: 180, B: 100, A: 70},
}

func faultColor(kind string) color.NRGBA {
	if c, ok := faultColors[kind]; ok {
		return c
	}
	return color.NRGBA{R: 150, G: 150, B: 60, A: 60}
}

// faultBands shades the fault windows over the whole height of a plot.
type faultBands []faultWindow

func (fb faultBands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, f := range fb {
		x0, x1 := trX(seconds(f.Start)), trX(seconds(f.End))
		x0, x1 = max(x0, c.Min.X), min(x1, c.Max.X)
		if x1 <= x0 {
			x1 = min(x0+1, c.Max.X) // an instant fault still shows
		}
		c.FillPolygon(faultColor(f.Kind), []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
	}
}

// bandThumb is a fault kind's legend entry.
type bandThumb color.NRGBA

func (b bandThumb) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(color.NRGBA(b), []vg.Point{c.Min, {X: c.Min.X, Y: c.Max.Y}, c.Max, {X: c.Max.X, Y: c.Min.Y}})
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// addFaults shades the windows and names their kinds in the legend.
func addFaults(p *plot.Plot, faults []faultWindow) {
	if len(faults) == 0 {
		return
	}
	p.Add(faultBands(faults))
	var kinds []string
	for _, f := range faults {
		if !slices.Contains(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		p.Legend.Add(k, bandThumb(faultColor(k)))
	}
}

// bucketWidth splits a run of total nanoseconds into about 100 buckets of
// at least 250 ms.
func bucketWidth(total int64) float64 {
	w := seconds(total) / 100
	return max(0.25, math.Ceil(w*4)/4)
}

func newTimePlot(title, ylabel string, total int64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the start"
	p.Y.Label.Text = ylabel
	p.X.Min, p.X.Max = 0, max(seconds(total), 1)
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// throughputFigure: acknowledged produces, produces with another outcome,
// and records read, per second, over time.
func throughputFigure(ops []checker.Op, faults []faultWindow, total int64) (figure, error) {
	w := bucketWidth(total)
	n := int(seconds(total)/w) + 1
	acked, other, read := make([]float64, n), make([]float64, n), make([]float64, n)
	for _, op := range ops {
		i := min(int(seconds(op.Complete)/w), n-1)
		switch {
		case op.Kind == checker.KindProduce && op.Outcome == checker.OutcomeOK:
			acked[i]++
		case op.Kind == checker.KindProduce:
			other[i]++
		case op.Kind == checker.KindFetch && op.Outcome == checker.OutcomeOK:
			read[i] += float64(len(op.Records))
		}
	}
	p := newTimePlot("Throughput (fault windows shaded)", "per second", total)
	addFaults(p, faults)
	series := []struct {
		name string
		v    []float64
	}{{"produces acknowledged", acked}, {"produces failed or unknown", other}, {"records read", read}}
	for k, s := range series {
		pts := make(plotter.XYs, n)
		for i := range n {
			pts[i] = plotter.XY{X: (float64(i) + 0.5) * w, Y: s.v[i] / w}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return figure{}, err
		}
		l.Color = plotutil.Color(k)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return render(p, "throughput", "Throughput over time")
}

// latencyFigure: the median, 99th percentile and maximum latency of the
// acknowledged produces completed in each bucket.
func latencyFigure(ops []checker.Op, faults []faultWindow, total int64) (figure, error) {
	w := bucketWidth(total)
	n := int(seconds(total)/w) + 1
	lat := make([][]float64, n)
	for _, op := range ops {
		if op.Kind == checker.KindProduce && op.Outcome == checker.OutcomeOK {
			i := min(int(seconds(op.Complete)/w), n-1)
			lat[i] = append(lat[i], float64(op.Complete-op.Invoke)/1e6)
		}
	}
	p := newTimePlot("Produce latency, acknowledged (fault windows shaded)", "milliseconds", total)
	addFaults(p, faults)
	for k, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
		var pts plotter.XYs
		for i, ls := range lat {
			if len(ls) > 0 {
				pts = append(pts, plotter.XY{X: (float64(i) + 0.5) * w, Y: quantile(ls, q.q)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return figure{}, err
		}
		l.Color, s.Color = plotutil.Color(k), plotutil.Color(k)
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(1.5)
		p.Add(l, s)
		p.Legend.Add(q.name, l, s)
	}
	return render(p, "latency", "Latency over time")
}

// quantile of xs (sorted in place), q in [0, 1].
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// outcomeCounts counts ops by operation ("produce franz-go") and outcome.
func outcomeCounts(ops []checker.Op, clientOf func(int) string) (ops2 []string, counts map[string]map[checker.Outcome]int) {
	counts = map[string]map[checker.Outcome]int{}
	for _, op := range ops {
		k := string(op.Kind) + " " + clientOf(op.Conn)
		if counts[k] == nil {
			counts[k] = map[checker.Outcome]int{}
			ops2 = append(ops2, k)
		}
		counts[k][op.Outcome]++
	}
	slices.Sort(ops2)
	return ops2, counts
}

var outcomeNames = []checker.Outcome{checker.OutcomeOK, checker.OutcomeFail, checker.OutcomeInfo}

func outcomeLabel(o checker.Outcome) string {
	switch o {
	case checker.OutcomeOK:
		return "ok"
	case checker.OutcomeFail:
		return "failed"
	}
	return "unknown"
}

// outcomeFigure: a bar per outcome (ok, failed, unknown) for each
// operation (the report's table has the exact counts).
func outcomeFigure(names []string, counts map[string]map[checker.Outcome]int) (figure, error) {
	p := plot.New()
	p.Title.Text = "Outcomes per operation"
	p.Y.Label.Text = "operations"
	p.Legend.Top = true
	if len(names) == 0 {
		names = []string{"no operations"}
	}
	width := vg.Points(float64(min(40, 300/(3*len(names)))))
	for k, o := range outcomeNames {
		vals := make(plotter.Values, len(names))
		for i, name := range names {
			vals[i] = float64(counts[name][o])
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return figure{}, err
		}
		b.Color = []color.Color{color.RGBA{G: 150, B: 60, A: 255}, color.RGBA{R: 200, G: 40, B: 40, A: 255}, color.RGBA{R: 230, G: 160, B: 20, A: 255}}[k]
		b.LineStyle.Width = 0
		b.Offset = vg.Length(k-1) * width
		p.Add(b)
		p.Legend.Add(outcomeLabel(o), b)
	}
	p.NominalX(names...)
	return render(p, "outcomes", "Outcomes per operation")
}

// render draws p as an SVG, without the XML prolog (it goes inline into
// the HTML report too).
func render(p *plot.Plot, name, title string) (figure, error) {
	wt, err := p.WriterTo(8*vg.Inch, 3.6*vg.Inch, "svg")
	if err != nil {
		return figure{}, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return figure{}, err
	}
	svg := buf.String()
	if i := strings.Index(svg, "<svg"); i > 0 {
		svg = svg[i:]
	}
	if !strings.HasPrefix(svg, "<svg") {
		return figure{}, fmt.Errorf("%s: not an SVG", name)
	}
	return figure{Name: name, Title: title, SVG: []byte(svg)}, nil
}
