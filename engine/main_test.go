package engine

import (
	"os"
	"testing"

	"rlhfstation/internal/testmodel"
)

func TestMain(m *testing.M) { os.Exit(testmodel.Main(m)) }
