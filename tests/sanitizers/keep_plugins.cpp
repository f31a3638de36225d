// Preloaded into the sanitizer test run (CMakePresets.json, debug test preset: LD_PRELOAD):
// dlclose that keeps every shared object loaded.
//
// Why: Open MPI 4.1 unloads its plugins (mca_*.so) in MPI_Finalize, before LeakSanitizer
// looks for leaks at exit. The memory those plugins allocate once and never free then shows
// up with "<unknown module>" frames that no suppression in lsan.supp can name, and telling it
// apart from a real leak needed a slow, full unwind at every malloc — most of the cost of
// each mpiexec launch under the sanitizers (4.1 s → 1.5 s for a 3-rank demo). Open MPI 5 has
// a parameter for this (mca_base_component_disable_dlclose); 4.1, Debian 12's, does not.
// Built without sanitizers: it is also preloaded into mpiexec, sh and python3.
extern "C" int dlclose(void* /*handle*/) { return 0; }
