package data

import "fmt"

func readParquet(path string, b []byte) (*source, error) {
	return nil, fmt.Errorf("%s: Parquet is not read yet", path)
}
