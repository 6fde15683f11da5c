package main

import (
	"cmp"
	"context"
	"fmt"
	"image/color"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// points is how many points a panel's series has, as Grafana asks of a
// panel about this wide: the step of the queries is the run over it.
const points = 600

// curve is one series of a panel's query as Grafana would draw it: named
// by the target's legendFormat.
type curve struct {
	name   string
	points []point
}

// evaluated is what a dashboard's queries returned over the run, and how
// they were expanded.
type evaluated struct {
	panels [][]curve // by panel
	in     interpolation
}

// evaluate runs every target of every panel as a range query over
// [start, end], with Grafana's variables expanded.
func evaluate(ctx context.Context, p *promServer, d *dashboard, start, end time.Time) (*evaluated, error) {
	in := newInterpolation(d, end.Sub(start), points, scrapeInterval)
	ev := &evaluated{in: in}
	for _, pn := range d.Panels {
		var curves []curve
		for _, t := range pn.Targets {
			expr, err := in.expand(t.Expr)
			if err != nil {
				return nil, fmt.Errorf("panel %q, query %s: %w", pn.Title, t.RefID, err)
			}
			ss, err := p.queryRange(ctx, expr, start, end, in.step)
			if err != nil {
				return nil, fmt.Errorf("panel %q, query %s: %w", pn.Title, t.RefID, err)
			}
			var cs []curve
			for _, s := range ss {
				cs = append(cs, curve{name: legend(t, s.labels), points: s.points})
			}
			slices.SortFunc(cs, func(a, b curve) int { return cmp.Compare(a.name, b.name) })
			curves = append(curves, cs...)
		}
		ev.panels = append(ev.panels, curves)
	}
	return ev, nil
}

// legendVar is a {{label}} of a legendFormat.
var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend names a series as Grafana does: the target's legendFormat with
// each {{label}} replaced by the series' value of it; without one, the
// series' labels.
func legend(t target, labels map[string]string) string {
	if t.LegendFormat == "" || t.LegendFormat == "__auto" {
		var kv []string
		for k, v := range labels {
			kv = append(kv, k+"="+strconv.Quote(v))
		}
		slices.Sort(kv)
		return "{" + strings.Join(kv, ", ") + "}"
	}
	return legendVar.ReplaceAllStringFunc(t.LegendFormat, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
}

// palette is Grafana's classic palette, darkened where it is too pale on
// white.
var palette = []color.RGBA{
	{0x62, 0x9e, 0x51, 0xff}, {0xd4, 0x9b, 0x1a, 0xff}, {0x1f, 0x78, 0xc1, 0xff}, {0xef, 0x84, 0x3c, 0xff},
	{0xe2, 0x4d, 0x42, 0xff}, {0x3a, 0xa8, 0xb8, 0xff}, {0xba, 0x43, 0xa9, 0xff}, {0x70, 0x5d, 0xa0, 0xff},
	{0x50, 0x86, 0x42, 0xff}, {0x96, 0x73, 0x02, 0xff},
}

// Sizes of the picture: a grid unit's height is a third of a column's
// width, about Grafana's proportions (30px rows, 24 columns on a wide
// screen, a little taller so that a legend fits).
const (
	pictureWidth = 42 * vg.Centimeter
	columnWidth  = pictureWidth / gridColumns
	rowHeight    = 0.8 * vg.Centimeter
	headerHeight = 1.6 * vg.Centimeter
	gap          = 0.15 * vg.Centimeter
)

func textStyle(size vg.Length, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler}
}

// drawDashboard draws the panels at their grid positions, with a header
// that says what was drawn, and writes the PNG.
func drawDashboard(d *dashboard, ev *evaluated, start, end time.Time, out string) error {
	// Grafana's typeface is a sans-serif.
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	w, h := pictureWidth, headerHeight+vg.Length(rows)*rowHeight
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	full := draw.New(img)
	full.SetColor(color.White)
	full.Fill(full.Rectangle.Path())

	title := textStyle(16, color.Black)
	full.FillText(title, vg.Point{X: gap * 2, Y: h - 0.8*vg.Centimeter}, "Grafana dashboard “"+d.Title+"” (docs/grafana/dlock.json)")
	sub := textStyle(9, color.Gray{0x55})
	full.FillText(sub, vg.Point{X: gap * 2, Y: h - 1.35*vg.Centimeter}, fmt.Sprintf(
		"Each panel's PromQL evaluated by Prometheus (query_range) over a %s run of bench/dashboard's workload on Redis, %s; scraped every %v; step %v, $__rate_interval %s; backend and kind: All.",
		end.Sub(start).Round(time.Second), start.UTC().Format("2006-01-02 15:04 UTC"), scrapeInterval, ev.in.step, promDuration(ev.in.rateInterval())))

	for i, p := range d.Panels {
		g := p.GridPos
		x0, x1 := vg.Length(g.X)*columnWidth+gap, vg.Length(g.X+g.W)*columnWidth-gap
		y1 := h - headerHeight - vg.Length(g.Y)*rowHeight - gap
		y0 := h - headerHeight - vg.Length(g.Y+g.H)*rowHeight + gap
		c := draw.Crop(full, x0, x1-w, y0, y1-h)
		if err := drawPanel(c, &p, ev.panels[i], start, end, ev.in.step); err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// drawPanel draws one panel into c: a frame, the title, the series, and
// the legend below them.
func drawPanel(c draw.Canvas, p *panel, curves []curve, start, end time.Time, step time.Duration) error {
	frame := draw.LineStyle{Color: color.Gray{0xcc}, Width: vg.Points(0.8)}
	r := c.Rectangle
	c.StrokeLines(frame, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min})

	pad := 0.2 * vg.Centimeter
	inner := draw.Crop(c, pad, -pad, pad, -pad)
	titleStyle := textStyle(11, color.Black)
	inner.FillText(titleStyle, vg.Point{X: inner.Min.X, Y: inner.Max.Y - titleStyle.Height("X")}, p.Title)

	legendStyle := textStyle(8, color.Black)
	legendH := layoutLegend(inner, legendStyle, curves, false)
	area := draw.Crop(inner, 0, 0, legendH, -titleStyle.Height("X")-pad/2)
	layoutLegend(draw.Crop(inner, 0, 0, 0, legendH-(inner.Max.Y-inner.Min.Y)), legendStyle, curves, true)

	pl := plot.New()
	pl.BackgroundColor = color.Transparent
	pl.X.Min, pl.X.Max = 0, end.Sub(start).Seconds()
	pl.X.Tick.Marker = minuteTicks{}
	pl.X.Tick.Label.Font.Size = vg.Points(8)
	pl.Y.Tick.Label.Font.Size = vg.Points(8)
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.Gray{0xe6}, color.Gray{0xe6}
	pl.Add(grid)
	log := p.logScale()
	unit := p.FieldConfig.Defaults.Unit
	integer := p.FieldConfig.Defaults.Decimals != nil && *p.FieldConfig.Defaults.Decimals == 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, cv := range curves {
		col := palette[i%len(palette)]
		for _, seg := range segments(cv.points, start, step, log) {
			for _, pt := range seg {
				lo, hi = min(lo, pt.Y), max(hi, pt.Y)
			}
			if len(seg) == 1 {
				s, err := plotter.NewScatter(seg)
				if err != nil {
					return err
				}
				s.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(1.5), Shape: draw.CircleGlyph{}}
				pl.Add(s)
				continue
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color, l.Width = col, vg.Points(1.2)
			pl.Add(l)
		}
	}
	switch {
	case math.IsInf(lo, 1): // no data: an empty axis, as Grafana shows "No data"
		pl.Y.Min, pl.Y.Max = 0, 1
		inner.FillText(textStyle(10, color.Gray{0x88}), area.Center(), "No data")
	case log:
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Min, pl.Y.Max = lo/1.5, hi*1.5
	default:
		pl.Y.Min, pl.Y.Max = min(0, lo), max(hi*1.1, lo+1e-9)
		if integer {
			pl.Y.Max = max(hi, 1) * 1.1
		}
	}
	pl.Y.Tick.Marker = unitTicks{unit: unit, log: log, integer: integer}
	pl.Draw(area)
	return nil
}

// segments cuts a series where it has no value (NaN, infinite, or not
// positive on a log scale) and where Prometheus returned no point for a
// step or more (a target that was not scraped), as Grafana breaks a line
// over nulls; x is in seconds since start.
func segments(pts []point, start time.Time, step time.Duration, log bool) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i, p := range pts {
		if i > 0 && p.t.Sub(pts[i-1].t) > step*3/2 && len(cur) > 0 {
			out = append(out, cur)
			cur = nil
		}
		if math.IsNaN(p.v) || math.IsInf(p.v, 0) || (log && p.v <= 0) {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: p.t.Sub(start).Seconds(), Y: p.v})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// layoutLegend lays the curves' names out in rows from the bottom of c,
// each after a swatch of its colour, and returns the height they take;
// with draw false it only measures.
func layoutLegend(c draw.Canvas, sty text.Style, curves []curve, drawIt bool) vg.Length {
	if len(curves) == 0 {
		return 0
	}
	swatch, space := 0.5*vg.Centimeter, 0.4*vg.Centimeter
	lineH := sty.Height("X") * 1.4
	// Rows from the top of the strip down: measure first.
	var rows [][]int
	var rowW vg.Length
	for i, cv := range curves {
		ew := swatch + space/2 + sty.Width(cv.name) + space
		if len(rows) == 0 || rowW+ew > c.Max.X-c.Min.X {
			rows = append(rows, nil)
			rowW = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], i)
		rowW += ew
	}
	height := vg.Length(len(rows)) * lineH
	if !drawIt {
		return height
	}
	for r, row := range rows {
		y := c.Min.Y + height - vg.Length(r+1)*lineH + lineH*0.2
		x := c.Min.X
		for _, i := range row {
			col := palette[i%len(palette)]
			mid := y + sty.Height("X")/2
			c.StrokeLine2(draw.LineStyle{Color: col, Width: vg.Points(2.5)}, x, mid, x+swatch, mid)
			x += swatch + space/2
			c.FillText(sty, vg.Point{X: x, Y: y}, curves[i].name)
			x += sty.Width(curves[i].name) + space
		}
	}
	return height
}

// minuteTicks labels the time axis, in seconds since the run started,
// every 30s as minutes:seconds.
type minuteTicks struct{}

func (minuteTicks) Ticks(lo, hi float64) []plot.Tick {
	every := 30.0
	if hi-lo > 10*60 {
		every = 120
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/every) * every; v <= hi; v += every {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%d:%02d", int(v)/60, int(v)%60)})
	}
	return ts
}

// unitTicks labels the y axis in the panel's Grafana unit: "s" as a
// duration, "ops" as a rate per second, "short" as a number.
type unitTicks struct {
	unit    string
	log     bool
	integer bool
}

func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if u.log {
		// 1, 2 and 5 times the powers of ten; the powers alone over more
		// than three decades, where the others would crowd.
		mantissas := []float64{1, 2, 5}
		if hi/lo > 1000 {
			mantissas = mantissas[:1]
		}
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			for _, m := range mantissas {
				if v := m * math.Pow(10, e); v >= lo && v <= hi {
					ts = append(ts, plot.Tick{Value: v})
				}
			}
		}
	} else {
		for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
			if t.Label != "" && (!u.integer || t.Value == math.Trunc(t.Value)) {
				ts = append(ts, plot.Tick{Value: t.Value})
			}
		}
	}
	for i := range ts {
		ts[i].Label = formatUnit(ts[i].Value, u.unit)
	}
	return ts
}

// formatUnit writes v in a Grafana unit.
func formatUnit(v float64, unit string) string {
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
	switch unit {
	case "s":
		switch a := math.Abs(v); {
		case a == 0:
			return "0"
		case a < 1e-3:
			return num(v*1e6) + " µs"
		case a < 1:
			return num(v*1e3) + " ms"
		case a < 60:
			return num(v) + " s"
		default:
			return num(v/60) + " min"
		}
	case "ops":
		return num(v) + "/s"
	default:
		return num(v)
	}
}
