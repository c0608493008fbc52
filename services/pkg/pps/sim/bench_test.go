package sim

import "testing"

func BenchmarkGenerate(b *testing.B) {
	b.Run("parking-9x288", func(b *testing.B) {
		for b.Loop() {
			Parking(1)
		}
	})
	b.Run("indoor-54x500", func(b *testing.B) {
		for b.Loop() {
			Indoor(1, 54, 500)
		}
	})
	b.Run("wireless-25", func(b *testing.B) {
		for b.Loop() {
			Wireless(1, 25).Dataset()
		}
	})
}

// BenchmarkModel is the plaintext model over generated data: what the demo shows next to
// the subscribers' result.
func BenchmarkModel(b *testing.B) {
	for _, bc := range []struct {
		name string
		ds   *Dataset
		src  string
	}{
		{"parking-mean", Parking(1), ParkingMean},
		{"indoor-r2-100", Indoor(1, 2, IndoorSamples), IndoorCorrelation},
		{"wireless-regression-5", Wireless(1, WirelessNodes).Dataset(), WirelessRegression},
	} {
		f := compile(b, bc.src)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.ds.Evaluate(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
