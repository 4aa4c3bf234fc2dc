package data

import "fmt"

func readFolder(path string, o Options) (*Dataset, error) {
	return nil, fmt.Errorf("%s: is a folder; folders of shards are not read yet", path)
}
