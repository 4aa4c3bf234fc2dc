package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// LibsEnv names the folder that, when set, is the only place the libraries are looked for
// (the CPU stand-in's build folder, or a toolkit the search would not find).
const LibsEnv = "RLHFSTATION_CUDA_LIBS"

// Libs are the full paths of the libraries the backend loads. CUDA may be a bare soname,
// left to the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
type Libs struct {
	CUDA          string // libcuda.so.1, the driver's user-space library
	NVRTC         string // libnvrtc.so.N
	NVRTCBuiltins string // libnvrtc-builtins.so.N.M beside it; NVRTC dlopens it while compiling ("" when absent)
	CUBLAS        string // libcublas.so.N
	CUBLASLt      string // libcublasLt.so.N, libcublas' dependency, preloaded by full path
}

// Sonames searched, newest first. NVRTC 11.2 to 11.8 all carry the soname libnvrtc.so.11.2.
var (
	nvrtcSonames  = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}
	cublasSonames = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}
)

// libEnv is what the search reads from the process: the environment, the file system and
// the driver's CUDA version (to skip libraries newer than the driver), so tests can fake it.
type libEnv struct {
	getenv        func(string) string
	exists        func(path string) bool
	glob          func(pattern string) []string
	driverVersion int // cuDriverGetVersion, e.g. 12020; 0 when unknown
}

func osLibEnv(driverVersion int) libEnv {
	return libEnv{
		getenv: os.Getenv,
		exists: func(p string) bool { fi, err := os.Stat(p); return err == nil && !fi.IsDir() },
		glob: func(p string) []string {
			m, _ := filepath.Glob(p)
			return m
		},
		driverVersion: driverVersion,
	}
}

// NotFoundError says which library was not found and every folder looked in.
type NotFoundError struct {
	What    string   // "NVRTC" or "cuBLAS"
	Names   []string // sonames tried, newest first
	Places  []string // folders searched, in order
	Skipped []string // libraries found but newer than the driver
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s not found (%s) in %s", e.What, strings.Join(e.Names, ", "), strings.Join(e.Places, ", "))
	if len(e.Skipped) > 0 {
		fmt.Fprintf(&b, "; skipped as newer than the driver: %s", strings.Join(e.Skipped, ", "))
	}
	return b.String()
}

// cudaCandidates lists where libcuda.so.1 is tried, in order: the override folder alone, or
// the loader's own search by soname, then the folders NVIDIA's container toolkit and Debian use.
func cudaCandidates(e libEnv) []string {
	if dir := e.getenv(LibsEnv); dir != "" {
		return []string{filepath.Join(dir, "libcuda.so.1")}
	}
	return []string{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"/usr/lib/wsl/lib/libcuda.so.1"}
}

// searchDirs lists the folders where NVRTC and cuBLAS are looked for: the override alone, or
// the toolkit named by $CUDA_HOME/$CUDA_PATH, /usr/local/cuda and its versioned siblings
// (newest first), the Python wheels' layouts under every site-packages found, and the system
// library folders.
func searchDirs(e libEnv) []string {
	if dir := e.getenv(LibsEnv); dir != "" {
		return []string{dir}
	}
	var dirs []string
	add := func(d ...string) {
		for _, x := range d {
			if x != "" && !slices.Contains(dirs, x) {
				dirs = append(dirs, x)
			}
		}
	}
	toolkit := func(root string) {
		add(filepath.Join(root, "lib64"), filepath.Join(root, "targets/x86_64-linux/lib"))
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if r := e.getenv(v); r != "" {
			toolkit(r)
		}
	}
	toolkit("/usr/local/cuda")
	versioned := e.glob("/usr/local/cuda-*")
	slices.SortFunc(versioned, func(a, b string) int { return compareVersions(b, a) })
	for _, r := range versioned {
		toolkit(r)
	}
	// Python wheels: nvidia/cu13/lib (CUDA 13), nvidia/{cuda_nvrtc,cublas}/lib (CUDA 12 and 11).
	var sites []string
	if v := e.getenv("VIRTUAL_ENV"); v != "" {
		sites = append(sites, e.glob(filepath.Join(v, "lib/python3*/site-packages"))...)
	}
	if v := e.getenv("CONDA_PREFIX"); v != "" {
		sites = append(sites, e.glob(filepath.Join(v, "lib/python3*/site-packages"))...)
		add(filepath.Join(v, "lib"))
	}
	if h := e.getenv("HOME"); h != "" {
		sites = append(sites, e.glob(filepath.Join(h, ".local/lib/python3*/site-packages"))...)
	}
	sites = append(sites, e.glob("/usr/local/lib/python3*/dist-packages")...)
	sites = append(sites, e.glob("/usr/local/lib/python3*/site-packages")...)
	sites = append(sites, e.glob("/usr/lib/python3/dist-packages")...)
	sites = append(sites, e.glob("/opt/conda/lib/python3*/site-packages")...)
	for _, s := range sites {
		add(filepath.Join(s, "nvidia/cu13/lib"), filepath.Join(s, "nvidia/cuda_nvrtc/lib"), filepath.Join(s, "nvidia/cublas/lib"))
	}
	add("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/lib")
	return dirs
}

// findLibs locates NVRTC and cuBLAS (libcuda is tried separately, see cudaCandidates): for
// each soname, newest first, the first folder holding it. A library whose major version is
// newer than the driver's is passed over: its CUBINs would not load.
func findLibs(e libEnv) (Libs, error) {
	dirs := searchDirs(e)
	var l Libs
	var skipped []string
	l.NVRTC, skipped = findSoname(e, dirs, nvrtcSonames)
	if l.NVRTC == "" {
		return l, &NotFoundError{What: "NVRTC", Names: nvrtcSonames, Places: dirs, Skipped: skipped}
	}
	// libnvrtc-builtins.so.MAJOR.MINOR beside NVRTC, the newest minor of NVRTC's major.
	major := sonameMajor(filepath.Base(l.NVRTC))
	builtins := e.glob(filepath.Join(filepath.Dir(l.NVRTC), "libnvrtc-builtins.so."+strconv.Itoa(major)+".*"))
	builtins = slices.DeleteFunc(builtins, func(p string) bool { return strings.Count(filepath.Base(p), ".") > 4 })
	slices.SortFunc(builtins, func(a, b string) int { return compareVersions(b, a) })
	if len(builtins) > 0 {
		l.NVRTCBuiltins = builtins[0]
	}
	l.CUBLAS, skipped = findSoname(e, dirs, cublasSonames)
	if l.CUBLAS == "" {
		return l, &NotFoundError{What: "cuBLAS", Names: cublasSonames, Places: dirs, Skipped: skipped}
	}
	lt := filepath.Join(filepath.Dir(l.CUBLAS), strings.Replace(filepath.Base(l.CUBLAS), "libcublas.", "libcublasLt.", 1))
	if !e.exists(lt) {
		return l, fmt.Errorf("cuBLAS: %s has no %s beside it", l.CUBLAS, filepath.Base(lt))
	}
	l.CUBLASLt = lt
	return l, nil
}

func findSoname(e libEnv, dirs, sonames []string) (found string, skipped []string) {
	for _, so := range sonames {
		for _, d := range dirs {
			p := filepath.Join(d, so)
			if !e.exists(p) {
				continue
			}
			if e.driverVersion > 0 && sonameMajor(so) > e.driverVersion/1000 {
				skipped = append(skipped, p)
				continue
			}
			return p, skipped
		}
	}
	return "", skipped
}

// sonameMajor is N in lib….so.N[.M…].
func sonameMajor(soname string) int {
	_, rest, ok := strings.Cut(soname, ".so.")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(strings.SplitN(rest, ".", 2)[0])
	return n
}

// compareVersions orders paths by the dotted or dashed numbers at their end
// (cuda-12.10 after cuda-12.9, builtins.so.12.8 after .12.4).
func compareVersions(a, b string) int {
	va, vb := versionOf(a), versionOf(b)
	for i := 0; i < max(len(va), len(vb)); i++ {
		var x, y int
		if i < len(va) {
			x = va[i]
		}
		if i < len(vb) {
			y = vb[i]
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

func versionOf(p string) []int {
	base := filepath.Base(p)
	if _, rest, ok := strings.Cut(base, ".so."); ok {
		base = rest
	} else if i := strings.LastIndexByte(base, '-'); i >= 0 {
		base = base[i+1:]
	}
	var v []int
	for _, f := range strings.Split(base, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			break
		}
		v = append(v, n)
	}
	return v
}
