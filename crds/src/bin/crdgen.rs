//! Prints the StreamJob CRD YAML (`crdgen > charts/streamjob-operator/crds/streamjob.io_streamjobs.yaml`).

fn main() -> Result<(), streamjob_crds::Error> {
    print!("{}", streamjob_crds::crd::crd_yaml()?);
    Ok(())
}
