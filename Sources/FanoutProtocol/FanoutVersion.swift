/// This build of fanout: what `--version` prints and `fanout_build_info` exports.
public enum FanoutVersion {
    /// The version (semantic versioning); `-dev` until a release is cut from it (CHANGELOG.md).
    public static let current = "0.9.0-dev"
}
