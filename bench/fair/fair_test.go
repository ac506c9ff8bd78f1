package fair

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestScenariosRunShort runs every scenario in its short form: the stacks
// start and stop, the flows run, spans and records are read and every
// report has its tables and checks. (Short numbers mean nothing, so the
// checks' outcomes are not asserted.) A process-level test: half a minute
// of real sockets.
func TestScenariosRunShort(t *testing.T) {
	testutil.Process(t)
	if testing.Short() {
		t.Skip("runs the fair-queue scenarios for about 30 s")
	}
	for _, sc := range All() {
		rep, err := sc.Run(context.Background(), Options{Short: true, Seed: 1})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		md := rep.Markdown()
		if len(rep.Tables) == 0 || len(rep.Checks) < 2 || !strings.Contains(md, "| target | measured | met |") {
			t.Errorf("%s: report without tables or checks:\n%s", sc.Name, md)
		}
	}
}
