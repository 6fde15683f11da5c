package main

import (
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// libColors gives every library the same colour in every panel; dlock's
// backends are drawn with thick solid lines, the peers dashed.
var libColors = map[string]color.RGBA{
	"dlock (redis)":     {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"redsync":           {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"bsm/redislock":     {R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	"rueidislock":       {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	"dlock (zookeeper)": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"go-zookeeper Lock": {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	"dlock (etcd)":      {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"etcd Mutex":        {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// decadeTicks labels 1, 2 and 5 times the powers of ten within the range.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ts
}

// writeChart draws hand-off latency p50 and grants/s against contenders,
// without and with think time, one line per library (log scales).
func writeChart(res *results, path string) error {
	type panel struct {
		title, ylabel string
		think         bool
		value         func(contendedResult) float64
	}
	panels := []panel{
		{"Hand-off to another waiter, p50 (no think time)", "ms (log scale)", false, func(r contendedResult) float64 { return r.HandoffP50.Seconds() * 1e3 }},
		{"Grants per second (no think time)", "grants/s (log scale)", false, func(r contendedResult) float64 { return r.GrantsPerS }},
		{"Hand-off to another waiter, p50 (1 ms think time)", "ms (log scale)", true, func(r contendedResult) float64 { return r.HandoffP50.Seconds() * 1e3 }},
		{"Grants per second (1 ms think time)", "grants/s (log scale)", true, func(r contendedResult) float64 { return r.GrantsPerS }},
	}
	const w, h, legendH = 30 * vg.Centimeter, 26 * vg.Centimeter, 2 * vg.Centimeter
	img := vgimg.New(w, h)
	full := draw.New(img)
	// The panels above, the legend in a strip below them.
	dc := draw.Crop(full, 0, 0, legendH, 0)
	strip := draw.Crop(full, 0, 0, 0, legendH-h)
	legends := [2]plot.Legend{plot.NewLegend(), plot.NewLegend()}
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter, PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	var names []string
	for _, l := range res.Libraries {
		if l.Missing == "" {
			names = append(names, l.Name)
		}
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "contenders (log scale)"
		p.Y.Label.Text = pn.ylabel
		p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 2, Label: "2"}, {Value: 8, Label: "8"}, {Value: 32, Label: "32"}, {Value: 128, Label: "128"}})
		drawn := false
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(7)
		p.Add(plotter.NewGrid())
		for _, name := range names {
			var pts plotter.XYs
			for _, r := range res.Contended {
				if r.Lib == name && r.Think == pn.think && r.Round <= 1 { // the first round runs every configuration
					if v := pn.value(r); v > 0 {
						pts = append(pts, plotter.XY{X: float64(r.N), Y: v})
					}
				}
			}
			if len(pts) == 0 {
				continue
			}
			slices.SortFunc(pts, func(a, b plotter.XY) int { return int(a.X - b.X) })
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			c := libColors[name]
			line.Color, points.Color = c, c
			line.Width = vg.Points(1.2)
			if name[:5] == "dlock" {
				line.Width = vg.Points(2.5)
			} else {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(line, points)
			drawn = true
			if i == 0 {
				k := slices.Index(names, name) * 2 / len(names)
				legends[k].Add(name, line, points)
			}
		}
		if drawn {
			p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
			p.Y.Tick.Marker = decadeTicks{}
			p.Y.Min, p.Y.Max = p.Y.Min*0.8, p.Y.Max*1.25 // room for the end ticks
		}
		p.Draw(tiles.At(dc, i%2, i/2))
	}
	for k := range legends {
		legends[k].TextStyle.Font.Size = vg.Points(10)
		legends[k].Left = true
		legends[k].Top = true
		col := draw.Crop(strip, vg.Length(k)*w/2+2*vg.Centimeter, -vg.Length(1-k)*w/2, 0, 0)
		legends[k].Draw(col)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
